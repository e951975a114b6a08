// #/live and #/live/<run>: a run's live sessions per user (rewarded, excluded and why, trained) and the
// version serving them, with its promotions and rollbacks. Kinds of secret are shown, never a value.

import { get } from "../api.js";
import { fmtNum, fmtTime, h, href, link, section } from "../dom.js";

const COLUMNS = [
  ["user", (u) => link(href.run(u.run), u.user, { testid: "live-user" })],
  ["sessions", (u) => fmtNum(u.sessions, 0)],
  ["running", (u) => fmtNum(u.running, 0)],
  ["rewarded", (u) => fmtNum(u.rewarded, 0)],
  ["mean reward", (u) => fmtNum(u.reward_mean, 3)],
  ["last reward", (u) => fmtTime(u.last_reward_at)],
  ["redacted", (u) => h("span", { testid: "live-redacted" }, u.redacted
    ? `${u.redacted} (${Object.entries(u.findings).map(([kind, n]) => `${kind}: ${n}`).join(", ")})` : "0")],
  ["unscanned", (u) => fmtNum(u.unscanned, 0)],
  ["trainable", (u) => fmtNum(u.trainable, 0)],
  ["trained", (u) => fmtNum(u.trained, 0)],
];

export async function liveView(ctx, run = "live") {
  ctx.crumbs([["runs", href.runs()], [`live: ${run}`, `#/live/${encodeURIComponent(run)}`]]);
  const report = await get("live", { run }, ctx.signal);
  const label = (v) => (v ? `policy-v${v}` : "base");
  const rows = report.users.map((u) => h("tr", { testid: "live-row" },
    COLUMNS.map(([, cell]) => h("td", {}, cell({ ...u, run })))));
  const serving = h("p", { testid: "live-serving" }, `New sessions are served ${label(report.promoted)}`,
    report.canary ? `; ${label(report.canary.version)} to ${Math.round(report.canary.fraction * 100)}% of them (canary)` : "", ".");
  const history = report.history.map((e) => h("li", {}, `${fmtTime(e.at)}: ${label(e.version)}, ${e.why}`));
  ctx.show(
    h("h1", {}, `Live sessions of ${run}`),
    section("Users", h("table", { class: "grid", testid: "live-table" },
      h("thead", {}, h("tr", {}, COLUMNS.map(([name]) => h("th", {}, name)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: COLUMNS.length }, "No live session yet."))))),
    section("Serving", serving, h("ul", { testid: "live-history" }, history)),
  );
}
