// A compact table over a keyset-paged listing, with a "more" button while pages remain.

import { errorBox, h } from "./dom.js";

/**
 * columns: [{label, cell: (row) => node|string, numeric?}]; rowAttrs(row): attributes of the <tr>.
 * Returns {el, ready}: the element, and a promise settled once the first page is shown.
 */
export function pagedTable({ pages, columns, rowAttrs = () => ({}), testid, empty = "Nothing here.",
                             onRows = () => {} }) {
  const body = h("tbody");
  const table = h("table", { class: "grid", testid },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.numeric ? "num" : null }, c.label)))),
    body);
  const more = h("button", { type: "button", class: "more", testid: "more", hidden: true });
  const note = h("p", { class: "muted small" });
  const el = h("div", { class: "table-wrap" }, table, note, more);
  let shown = 0;

  async function load() {
    table.dataset.state = "loading"; // "ready" once the page is shown: for tests and people alike
    more.disabled = true;
    more.textContent = "Loading…";
    try {
      const rows = await pages.next();
      onRows(rows); // before the cells are built: e.g. a colour scale widened by this page
      body.append(...rows.map((row) => h("tr", rowAttrs(row),
        columns.map((c) => h("td", { class: c.numeric ? "num" : null }, c.cell(row))))));
      shown += rows.length;
      note.textContent = shown ? "" : empty;
    } catch (error) {
      if (error.name === "AbortError") return;
      el.append(errorBox(error));
    }
    more.hidden = pages.done;
    more.disabled = false;
    more.textContent = `More (${shown} shown)`;
    table.dataset.state = "ready";
  }

  more.addEventListener("click", load);
  return { el, ready: load() };
}
