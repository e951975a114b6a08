// #/runs/NAME: the run's summary, its capture health, the learner's metrics, its groups and its rollouts.

import { get, pager } from "../api.js";
import { badge, dash, facts, fmtNum, fmtPct, fmtTime, h, href, link, section } from "../dom.js";
import { lineChart, metricKeys, seriesOf } from "../charts.js";
import { filterBar } from "../filters.js";
import { pagedTable } from "../table.js";
import { rewardCell, RewardScale, rolloutList } from "./rollouts.js";

const GROUP_STATUSES = ["open", "ready", "consumed"];
const MAX_STEP_PAGES = 10; // 10,000 steps: far more than a chart can show apart

function counts(byStatus, testid) {
  const entries = Object.entries(byStatus || {});
  if (!entries.length) return dash();
  return h("span", { class: "counts", testid }, entries.map(([status, n]) =>
    h("span", { class: "count", dataset: { status } }, badge(status), ` ${fmtNum(n)}`)));
}

const VERSION_ROWS_OPEN = 12; // more versions than this: the table starts folded under the chart

function versionTable(byVersion) {
  const table = h("table", { class: "grid narrow", testid: "reward-by-version" },
    h("thead", {}, h("tr", {}, h("th", { class: "num" }, "policy version"), h("th", { class: "num" }, "rollouts"),
      h("th", { class: "num" }, "mean reward"))),
    h("tbody", {}, byVersion.map((v) => h("tr", { dataset: { version: String(v.policy_version) } },
      h("td", { class: "num" }, `v${v.policy_version}`), h("td", { class: "num" }, fmtNum(v.rollouts)),
      h("td", { class: "num" }, fmtNum(v.reward_mean, 4))))));
  const box = h("details", { class: "version-table" }, h("summary", {}, `${byVersion.length} versions`),
    h("div", { class: "scroll-box" }, table));
  box.open = byVersion.length <= VERSION_ROWS_OPEN;
  return box;
}

function versionsPanel(byVersion) {
  if (!byVersion.length) return h("p", { class: "muted" }, "No calls yet.");
  const points = byVersion.map((v) => ({ x: v.policy_version, y: v.reward_mean }));
  return h("div", {}, lineChart("mean reward", points, "v"), versionTable(byVersion));
}

function summaryCard(summary) {
  const versions = versionsPanel(summary.reward_by_version || []);
  return section("Summary",
    h("div", { class: "two-col" },
      facts([
        ["rollouts", h("span", { testid: "stat-rollouts" }, fmtNum(summary.rollouts))],
        ["by status", counts(summary.rollouts_by_status, "rollouts-by-status")],
        ["groups", counts(summary.groups_by_status, "groups-by-status")],
        ["mean reward", h("span", { testid: "stat-reward-mean" }, fmtNum(summary.reward_mean, 4))],
        ["calls", `${fmtNum(summary.calls)} (${fmtNum(summary.side_calls)} side calls)`],
        ["roots / forks", `${fmtNum(summary.roots)} / ${fmtNum(summary.forks)}`],
        ["fork rate", h("span", { testid: "stat-fork-rate" }, fmtPct(summary.fork_rate))],
        ["drift tokens", fmtNum(summary.drift_tokens)],
        ["tokens", `${fmtNum(summary.prompt_tokens)} prompt · ${fmtNum(summary.output_tokens)} output`],
        ["learner steps", h("span", { testid: "stat-learner-steps" }, fmtNum(summary.learner_steps))],
      ], { testid: "run-summary" }),
      h("div", {}, h("h3", {}, "Reward by policy version"), versions)));
}

function interval(p) {
  if (p.reward_low === null || p.reward_low === undefined) return dash();
  return `${fmtNum(p.reward_low, 3)} – ${fmtNum(p.reward_high, 3)}`;
}

// Evaluation: per policy over the run's pinned rollouts (GET .../summary "policies"), then each task's passes.
function evaluationCard(summary) {
  const policies = summary.policies || [];
  if (!policies.length) return null;
  const num = (label) => h("th", { class: "num" }, label);
  const perPolicy = h("table", { class: "grid narrow", testid: "policy-results" },
    h("thead", {}, h("tr", {}, h("th", {}, "policy"), num("tasks"), num("rollouts"), num("passed"), num("pass@1"),
      num("pass@k"), num("k"), num("mean reward"), num("95% interval"), num("failures"))),
    h("tbody", {}, policies.map((p) => h("tr", { testid: "policy-row", dataset: { policy: p.policy } },
      h("td", {}, p.policy), h("td", { class: "num" }, fmtNum(p.tasks)), h("td", { class: "num" }, fmtNum(p.rollouts)),
      h("td", { class: "num" }, fmtNum(p.passed)), h("td", { class: "num", testid: "pass-at-1" }, fmtPct(p.pass_at_1)),
      h("td", { class: "num", testid: "pass-at-k" }, fmtPct(p.pass_at_k)), h("td", { class: "num" }, fmtNum(p.k)),
      h("td", { class: "num" }, fmtNum(p.reward_mean, 3)), h("td", { class: "num" }, interval(p)),
      h("td", { class: "num" }, fmtNum(p.failures))))));
  const labels = policies.map((p) => p.policy);
  const perTask = h("table", { class: "grid narrow", testid: "policy-tasks" },
    h("thead", {}, h("tr", {}, h("th", {}, "task"), labels.map((label) => num(label)))),
    h("tbody", {}, (summary.policy_tasks || []).map((t) => h("tr", { testid: "policy-task-row" },
      h("td", {}, t.task), labels.map((label) => {
        const cell = t.policies[label];
        return h("td", { class: "num" }, cell ? `${fmtNum(cell.passed)}/${fmtNum(cell.rollouts)}` : dash());
      })))));
  const tasks = h("details", { class: "version-table" }, h("summary", {}, `successes per task (${fmtNum(
    (summary.policy_tasks || []).length)} tasks)`), perTask);
  tasks.open = (summary.policy_tasks || []).length <= VERSION_ROWS_OPEN;
  return section("Evaluation", h("p", { class: "muted small" },
    "Rollouts pinned to a policy; a pass is a verifier reward of 1, a failed rollout counts as 0."), perPolicy, tasks);
}

// Capture health per harness × model (GET .../health): how many later turns extended the previous one
// exactly (one sample holds both), and what broke the others: forks, false forks, retries.
function healthCard(rows) {
  if (!rows.length) return null;
  const num = (label) => h("th", { class: "num" }, label);
  const cell = (value, testid) => h("td", { class: "num", testid }, value);
  return section("Capture health", h("p", { class: "muted small" },
    "A later turn should extend the previous turn's prompt and output exactly; a fork lost sampled tokens, a ",
    "false fork rewrote an earlier prompt (one trajectory became two samples)."),
  h("table", { class: "grid narrow", testid: "capture-health" },
    h("thead", {}, h("tr", {}, h("th", {}, "harness"), h("th", {}, "model"), num("rollouts"), num("calls"),
      num("later turns"), num("exact extensions"), num("forks"), num("drift tokens"), num("false forks"),
      num("retried"), num("side calls"))),
    h("tbody", {}, rows.map((r) => h("tr", { testid: "health-row", dataset: { harness: r.harness ?? "" } },
      h("td", {}, r.harness ?? dash()), h("td", {}, r.model), cell(fmtNum(r.rollouts)), cell(fmtNum(r.calls)),
      cell(fmtNum(r.later_turns)), cell(fmtPct(r.extension_rate), "extension-rate"), cell(fmtNum(r.forks), "forks"),
      cell(fmtNum(r.drift_tokens)), cell(fmtNum(r.false_forks), "false-forks"), cell(fmtNum(r.retried), "retried"),
      cell(fmtNum(r.side_calls)))))));
}

async function loadSteps(name, signal) {
  const pages = pager(`runs/${encodeURIComponent(name)}/steps`, {}, signal, 1000);
  const steps = [];
  for (let i = 0; i < MAX_STEP_PAGES && !pages.done; i++) steps.push(...await pages.next());
  return { steps, truncated: !pages.done };
}

// Steps whose train/inference mismatch crossed the learner's [loss] mismatch_alarm: said loudly.
function mismatchBanner(steps) {
  const alarmed = steps.filter((st) => st.metrics?.mismatch_alarmed === true);
  if (!alarmed.length) return null;
  const worst = Math.max(...alarmed.map((st) => st.metrics.mismatch_mean_abs ?? 0));
  return h("p", { class: "banner warn", testid: "mismatch-banner" },
    `Train/inference mismatch above the alarm at ${fmtNum(alarmed.length)} of ${fmtNum(steps.length)} steps `
    + `(up to ${fmtNum(worst, 4)} nats per token): the engine is not computing what the learner computes. `
    + "Usual causes: a bfloat16 engine, another chat template, an adapter the engine did not apply.");
}

function chartsCard(steps, truncated) {
  if (!steps.length) return section("Learner", h("p", { class: "muted", testid: "no-steps" }, "No learner steps yet."));
  const [main, rest] = metricKeys(steps);
  const more = h("details", { class: "more-metrics" }, h("summary", {}, `more metrics (${rest.length})`));
  // The other charts are drawn when first opened: a learner reports ~30 keys.
  more.addEventListener("toggle", () => {
    if (more.open && more.childElementCount === 1) {
      more.append(h("div", { class: "charts" }, rest.map((k) => lineChart(k, seriesOf(steps, k)))));
    }
  });
  return section("Learner",
    mismatchBanner(steps),
    h("p", { class: "muted small" }, `${fmtNum(steps.length)} steps`, truncated ? " (first pages only)" : ""),
    h("div", { class: "charts", testid: "charts" }, main.map((k) => lineChart(k, seriesOf(steps, k)))),
    rest.length ? more : null);
}

function groupsCard(ctx, run) {
  const slot = h("div");
  const scale = new RewardScale();
  const show = (filters) => {
    const table = pagedTable({
      pages: pager("groups", { run, ...filters }, ctx.signal),
      testid: "groups-table",
      empty: "No groups match.",
      onRows: (rows) => scale.see(rows.flatMap((g) => (g.rollouts || []).map((r) => r.reward))),
      rowAttrs: (g) => ({ testid: "group-row", dataset: { groupId: String(g.id), status: g.status } }),
      columns: [
        { label: "group", cell: (g) => link(href.group(g.id), `#${g.id} ${g.name}`, { testid: "group-link" }) },
        { label: "task", cell: (g) => g.task },
        { label: "status", cell: (g) => badge(g.status) },
        { label: "size", numeric: true, cell: (g) => fmtNum(g.size) },
        { label: "rewards", cell: (g) => h("span", { class: "reward-row" },
          (g.rollouts || []).map((r) => rewardCell(r, scale))) },
        { label: "ready", cell: (g) => fmtTime(g.ready_at) },
      ],
    });
    slot.replaceChildren(table.el);
    return table.ready;
  };
  const filters = filterBar([
    { name: "status", label: "status", type: "select", options: GROUP_STATUSES },
    { name: "task", label: "task", size: 16 },
  ], show, "group-filters");
  return { el: section("Groups", filters, slot), ready: show({}) };
}

// Train/inference mismatch per harness × model × version (GET .../mismatch), from the calls the learner trained.
function mismatchCard(rows) {
  if (!rows.length) return null;
  const num = (label) => h("th", { class: "num" }, label);
  const cell = (value, testid) => h("td", { class: "num", testid }, value);
  return section("Train/inference mismatch", h("p", { class: "muted small" },
    "|learner − sampler| log-prob of the tokens each policy version sampled, pooled over the calls the ",
    "learner trained; a call's page shows it token by token."),
  h("table", { class: "grid narrow", testid: "mismatch-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "harness"), h("th", {}, "model"), h("th", {}, "version"), num("calls"),
      num("tokens"), num("mean |Δ|"), num("max |Δ|"), num("k3"), num("over 0.1"))),
    h("tbody", {}, rows.map((r) => h("tr", { testid: "mismatch-row", dataset: { version: String(r.version) } },
      h("td", {}, r.harness ?? dash()), h("td", {}, r.model), h("td", {}, `v${r.version}`), cell(fmtNum(r.calls)),
      cell(fmtNum(r.tokens)), cell(fmtNum(r.mean_abs, 5), "mismatch-row-mean"), cell(fmtNum(r.max_abs, 4)),
      cell(fmtNum(r.k3, 6)), cell(fmtPct(r.frac_over)))))));
}

export async function runView(ctx, name) {
  ctx.crumbs([["runs", href.runs()], [name, href.run(name)]]);
  const path = `runs/${encodeURIComponent(name)}`;
  const [run, summary, health, mismatch, steps] = await Promise.all([
    get(path, {}, ctx.signal), get(`${path}/summary`, {}, ctx.signal), get(`${path}/health`, {}, ctx.signal),
    get(`${path}/mismatch`, {}, ctx.signal), loadSteps(name, ctx.signal)]);
  const groups = groupsCard(ctx, name);
  const rollouts = rolloutList(ctx, { run: name });
  ctx.show(
    h("h1", {}, "Run ", h("span", { testid: "run-name" }, run.name)),
    h("p", { class: "muted small" }, `created ${fmtTime(run.created_at)} · capture ${run.config?.capture ?? "engine"}`),
    summaryCard(summary),
    evaluationCard(summary),
    healthCard(health),
    mismatchCard(mismatch),
    chartsCard(steps.steps, steps.truncated),
    groups.el,
    section("Rollouts", rollouts.el));
  await Promise.all([groups.ready, rollouts.ready]);
}
