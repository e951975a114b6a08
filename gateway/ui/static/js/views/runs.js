// #/runs: every run, newest first, more pages on demand, filterable by a name substring; each with
// its rollouts in numbers (counted by the API for the page's runs only).

import { pager } from "../api.js";
import { fmtNum, fmtTime, h, href, link } from "../dom.js";
import { filterBar } from "../filters.js";
import { pagedTable } from "../table.js";

const COLUMNS = [
  { label: "id", numeric: true, cell: (r) => String(r.id) },
  { label: "run", cell: (r) => link(href.run(r.name), r.name, { testid: "run-link" }) },
  { label: "capture", cell: (r) => r.config?.capture ?? "engine" },
  { label: "rollouts", numeric: true, cell: (r) => h("span", { testid: "run-rollouts" }, fmtNum(r.rollouts)) },
  { label: "finished", numeric: true,
    cell: (r) => h("span", { testid: "run-finished" }, fmtNum(r.rollouts_finished)) },
  { label: "reward mean", numeric: true,
    cell: (r) => h("span", { testid: "run-reward-mean" }, fmtNum(r.reward_mean, 3)) },
  { label: "last activity", cell: (r) => h("span", { testid: "run-last-activity" }, fmtTime(r.last_activity)) },
  { label: "created", cell: (r) => fmtTime(r.created_at) },
];

export function runsView(ctx) {
  ctx.crumbs([["runs", href.runs()]]);
  const slot = h("div");
  const show = (filters) => {
    const table = pagedTable({
      pages: pager("runs", { ...filters, order: "desc" }, ctx.signal),
      testid: "runs-table",
      empty: "No runs recorded yet.",
      rowAttrs: (run) => ({ testid: "run-row", dataset: { run: run.name } }),
      columns: COLUMNS,
    });
    slot.replaceChildren(table.el);
    return table.ready;
  };
  ctx.show(
    h("h1", {}, "Runs"),
    h("section", { class: "card" }, filterBar([{ name: "name", label: "name contains", size: 24 }], show, "run-filters"),
      slot));
  return show({});
}
