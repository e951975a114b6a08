// #/rollouts/ID: the rollout's outcome, the conversation as the agent saw it, and its calls.

import { get, pager } from "../api.js";
import { badge, callLink, dash, facts, fmtDuration, fmtNum, fmtTime, h, href, link, section, tagList } from "../dom.js";
import { pagedTable } from "../table.js";

const CLIP_CHARS = 2000; // system prompts of real agents run to tens of kilobytes

/** Text in a <pre>, clipped with a button that shows the rest. */
export function clippedText(text, testid) {
  const pre = h("pre", { class: "content", testid });
  if (text.length <= CLIP_CHARS) {
    pre.textContent = text;
    return pre;
  }
  pre.textContent = `${text.slice(0, CLIP_CHARS)}…`;
  const button = h("button", { type: "button", class: "linkish" }, `show all ${fmtNum(text.length)} characters`);
  button.addEventListener("click", () => { pre.textContent = text; button.remove(); });
  return h("div", {}, pre, button);
}

function prettyArguments(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return String(args); // the model may emit arguments that are not JSON: show them as sampled
  }
}

function toolCall(call) {
  return h("div", { class: "tool-call", testid: "tool-call", dataset: { name: call.name } },
    h("div", {}, h("span", { class: "fn" }, call.name), h("span", { class: "muted small" }, ` ${call.id ?? ""}`)),
    h("pre", { class: "args", testid: "tool-arguments" }, prettyArguments(call.arguments)));
}

function message(m, index) {
  const label = m.role === "tool" ? "tool result" : m.role;
  return h("article", { class: `msg role-${m.role}`, testid: "message", dataset: { role: m.role, index: String(index) } },
    h("header", {}, h("span", {}, h("span", { class: "role" }, label),
      m.tool_call_id ? h("span", { class: "muted" }, ` for ${m.tool_call_id}`) : null),
      m.call_id != null ? link(href.call(m.call_id), `call #${m.call_id}`, { testid: "message-call-link" }) : null),
    m.content ? clippedText(m.content, "message-content") : null,
    (m.tool_calls || []).map(toolCall));
}

function header(rollout) {
  const components = Object.entries(rollout.rewards || {});
  const graph = rollout.graph || {};
  return section("Rollout",
    facts([
      ["run", link(href.run(rollout.run), rollout.run)],
      ["task", rollout.task],
      ["group", rollout.group_id != null ? link(href.group(rollout.group_id), rollout.group) : rollout.group],
      ["status", h("span", { testid: "rollout-status" }, badge(rollout.status))],
      ["reward", h("span", { testid: "rollout-reward", class: "big" }, fmtNum(rollout.reward, 4))],
      ["components", components.length
        ? h("span", { class: "components", testid: "reward-components" }, components.map(([name, value]) =>
            h("span", { class: "component", dataset: { name } }, `${name} = ${fmtNum(value, 4)}`)))
        : dash()],
      rollout.error ? ["error", h("span", { class: "error-text", testid: "rollout-error" }, rollout.error)] : null,
      ["harness", rollout.meta?.harness ?? dash()],
      ["calls", `${fmtNum(rollout.num_calls)} · ${fmtNum(graph.roots)} roots · ${fmtNum(graph.forks)} forks · `
                + `${fmtNum(graph.drift_tokens)} drift tokens`],
      ["started", fmtTime(rollout.created_at)],
      ["duration", fmtDuration(rollout.created_at, rollout.finished_at)],
    ], { testid: "rollout-header" }));
}

/** The judge's verdict: score or abstention, its reasons, the call's tokens and cost. */
function judgeSection(detail) {
  const shared = detail.shared_by > 1 ? ` (one call for ${detail.shared_by} rollouts of the group)` : "";
  const cost = detail.cost_usd == null ? "unknown to litellm" : `$${fmtNum(detail.cost_usd, 6)}`;
  return section("Judge",
    facts([
      ["model", h("span", { testid: "judge-model" }, detail.model)],
      ["score", h("span", { testid: "judge-score" },
        detail.abstained ? badge("abstained") : fmtNum(detail.score, 4))],
      ["reasons", clippedText(detail.reasons || "", "judge-reasons")],
      ["tokens", h("span", { testid: "judge-tokens" },
        `${fmtNum(detail.prompt_tokens)} prompt + ${fmtNum(detail.completion_tokens)} completion${shared}`)],
      ["cost", h("span", { testid: "judge-cost" }, cost)],
      ["call", h("span", { testid: "judge-call" }, detail.cached ? "answered from the cache"
        : `${fmtNum(detail.attempts)} attempt(s), ${fmtNum(detail.latency_s, 2)} s`)],
    ], { testid: "judge-details" }));
}

/** The verifier's side of the reward: its exit status, the metrics of reward.json (never added to the
 * reward), its error and its output (head and tail when long, the cut said in the text). */
function verifierSection(detail) {
  const metrics = Object.entries(detail.metrics || {});
  const log = detail.log || "";
  return section("Verifier",
    facts([
      ["exit status", h("span", { testid: "verifier-exit-code" }, fmtNum(detail.exit_code))],
      ["metrics", metrics.length
        ? h("span", { class: "components", testid: "verifier-metrics" }, metrics.map(([name, value]) =>
            h("span", { class: "component", dataset: { name } }, `${name} = ${fmtNum(value, 4)}`)))
        : dash()],
      detail.error ? ["error", h("span", { class: "error-text", testid: "verifier-error" }, detail.error)] : null,
      ["log", log
        ? h("details", { testid: "verifier-log" },
            h("summary", {}, `the verifier's output (${fmtNum(log.length)} characters)`),
            h("pre", { class: "content" }, log))
        : dash()],
    ], { testid: "verifier-details" }));
}

function agentSection(rollout) {
  const log = rollout.agent_log || "";
  return section("Agent",
    facts([
      ["exit status", h("span", { testid: "agent-exit-code" }, fmtNum(rollout.agent_exit_code))],
      ["engine time", `${fmtNum(rollout.engine_s, 1)} s`],
      ["log", log
        ? h("details", { testid: "agent-log" },
            h("summary", {}, `the tail of the agent's output (${fmtNum(log.length)} characters)`),
            h("pre", { class: "content" }, log))
        : dash()],
    ], { testid: "agent-details" }));
}

function forkCell(c) {
  if (c.fork_of == null) return dash();
  return h("span", { class: "fork", testid: "call-fork" }, "fork of ", callLink(c.fork_of),
    ` · ${fmtNum(c.drift_tokens)} drift`);
}

function callsTable(ctx, rolloutId) {
  return pagedTable({
    pages: pager(`rollouts/${rolloutId}/calls`, { tokens: "false" }, ctx.signal),
    testid: "calls-table",
    empty: "No calls recorded.",
    rowAttrs: (c) => ({ testid: "call-row", class: c.tags?.length ? "side" : null,
                        dataset: { callId: String(c.id), tags: (c.tags || []).join(",") } }),
    columns: [
      { label: "call", cell: (c) => callLink(c.id, { testid: "call-link" }) },
      { label: "parent", cell: (c) => callLink(c.parent_id) },
      { label: "fork", cell: forkCell },
      { label: "tags", cell: (c) => h("span", { testid: "call-tags" }, tagList(c.tags)) },
      { label: "dialect", cell: (c) => c.dialect },
      { label: "finish", cell: (c) => c.finish_reason ?? dash() },
      { label: "version", numeric: true, cell: (c) => `v${c.policy_version}` },
      { label: "prompt", numeric: true, cell: (c) => fmtNum(c.num_prompt_tokens) },
      { label: "output", numeric: true, cell: (c) => fmtNum(c.num_output_tokens) },
      { label: "latency", numeric: true, cell: (c) => `${fmtNum(c.latency_ms, 0)} ms` },
    ],
  });
}

export async function rolloutView(ctx, id) {
  const [rollout, conversation] = await Promise.all([
    get(`rollouts/${id}`, {}, ctx.signal), get(`rollouts/${id}/conversation`, {}, ctx.signal)]);
  ctx.crumbs([["runs", href.runs()], [rollout.run, href.run(rollout.run)],
    rollout.group_id != null ? [`group #${rollout.group_id}`, href.group(rollout.group_id)] : null,
    [`rollout #${rollout.id}`, href.rollout(rollout.id)]]);
  const messages = conversation.messages || [];
  const calls = callsTable(ctx, rollout.id);
  ctx.show(
    h("h1", {}, `Rollout #${rollout.id} `, h("span", { class: "muted" }, rollout.task)),
    header(rollout),
    rollout.agent_exit_code != null || rollout.agent_log ? agentSection(rollout) : null,
    rollout.reward_details?.verifier ? verifierSection(rollout.reward_details.verifier) : null,
    rollout.reward_details?.judge ? judgeSection(rollout.reward_details.judge) : null,
    section(`Conversation (${messages.length} messages)`,
      h("div", { class: "conversation", testid: "conversation" },
        messages.length ? messages.map(message) : h("p", { class: "muted" }, "No calls recorded."))),
    section("Calls", calls.el));
  await calls.ready;
}
