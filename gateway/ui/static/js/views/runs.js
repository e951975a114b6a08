// #/runs: every run, newest pages on demand, filterable by a name substring.

import { pager } from "../api.js";
import { fmtTime, h, href, link } from "../dom.js";
import { filterBar } from "../filters.js";
import { pagedTable } from "../table.js";

export function runsView(ctx) {
  ctx.crumbs([["runs", href.runs()]]);
  const slot = h("div");
  const show = (filters) => {
    const table = pagedTable({
      pages: pager("runs", filters, ctx.signal),
      testid: "runs-table",
      empty: "No runs recorded yet.",
      rowAttrs: (run) => ({ testid: "run-row", dataset: { run: run.name } }),
      columns: [
        { label: "id", numeric: true, cell: (r) => String(r.id) },
        { label: "run", cell: (r) => link(href.run(r.name), r.name, { testid: "run-link" }) },
        { label: "capture", cell: (r) => r.config?.capture ?? "engine" },
        { label: "created", cell: (r) => fmtTime(r.created_at) },
      ],
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
