// #/policies: every policy the server knows (an adapter lineage: runs and live users bound to it, its
// current version, the versions each engine holds); #/policies/<name>: its versions, each with its
// digest, proof, engines, the mean reward of the rollouts it served and its held-out pass@1.

import { get } from "../api.js";
import { dash, fmtNum, fmtPct, fmtTime, h, href, link, section } from "../dom.js";

const label = (v) => (v ? `v${v}` : "base");
const list = (items, make = (x) => x) => (items.length ? items.map(make).flatMap((x, i) => (i ? [", ", x] : [x])) : [dash()]);

const SUMMARY = [
  ["policy", (p) => link(href.policy(p.policy), p.policy, { testid: "policy-link" })],
  ["serves", (p) => h("span", { testid: "policy-current" }, label(p.current_version))],
  ["loaded", (p) => list(Object.keys(p.loaded).map(Number).filter((v) => v).sort((a, b) => a - b), label)],
  ["published", (p) => fmtNum(p.published, 0)],
  ["runs", (p) => list(p.runs, (run) => link(href.run(run), run))],
  ["live users", (p) => list(p.live_users)],
];

const VERSIONS = [
  ["version", (v) => h("span", { testid: "version-label" }, label(v.version))],
  ["engine name", (v) => v.name],
  ["digest", (v) => (v.digest ? h("code", { title: v.digest }, v.digest.slice(0, 12)) : dash())],
  ["published", (v) => fmtTime(v.published_at)],
  ["proven", (v) => (v.proven === null ? dash() : v.proven ? "yes" : "no")],
  ["engines", (v) => list(v.engines)],
  ["rollouts", (v) => fmtNum(v.rollouts, 0)],
  ["mean reward", (v) => h("span", { testid: "version-reward" }, fmtNum(v.reward_mean, 3))],
  ["held-out", (v) => fmtNum(v.eval_rollouts, 0)],
  ["pass@1", (v) => h("span", { testid: "version-pass1" }, fmtPct(v.pass_at_1))],
  ["pass@k", (v) => (v.k ? `${fmtPct(v.pass_at_k)} (k=${v.k})` : dash())],
];

function grid(columns, rows, testid, rowAttrs, empty) {
  return h("table", { class: "grid", testid },
    h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", {}, name)))),
    h("tbody", {}, rows.length
      ? rows.map((row) => h("tr", rowAttrs(row), columns.map(([, cell]) => h("td", {}, cell(row)))))
      : h("tr", {}, h("td", { colspan: columns.length }, empty))));
}

export async function policiesView(ctx) {
  ctx.crumbs([["policies", href.policies()]]);
  const policies = await get("policies", {}, ctx.signal);
  ctx.show(
    h("h1", {}, "Policies"),
    section("Adapter lineages on this server",
      grid(SUMMARY, policies, "policies-table", (p) => ({ testid: "policy-summary-row", dataset: { policy: p.policy } }),
        "No policy yet.")),
  );
}

export async function policyView(ctx, name) {
  ctx.crumbs([["policies", href.policies()], [name, href.policy(name)]]);
  const policy = await get(`policies/${encodeURIComponent(name)}`, {}, ctx.signal);
  ctx.show(
    h("h1", {}, `Policy ${policy.policy}`),
    h("p", { testid: "policy-serving" }, `New rollouts are served ${label(policy.current_version)}; runs: `,
      ...list(policy.runs, (run) => link(href.run(run), run)), "; live users: ", ...list(policy.live_users), "."),
    section("Versions", grid(VERSIONS, policy.versions, "versions-table",
      (v) => ({ testid: "version-row", dataset: { version: String(v.version) } }), "No version yet.")),
  );
}
