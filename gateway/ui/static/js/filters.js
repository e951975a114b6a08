// A row of filter inputs; any change re-queries the listing from its first page.

import { h } from "./dom.js";

/**
 * fields: [{name, label, type: "text" | "number" | "select", options?: [value...], placeholder?, step?}]
 * onChange(values): values holds the non-empty fields only.
 */
export function filterBar(fields, onChange, testid = "filters") {
  const inputs = fields.map((f) => {
    const input = f.type === "select"
      ? h("select", { name: f.name }, h("option", { value: "" }, "any"),
          f.options.map((o) => h("option", { value: o }, o)))
      : h("input", { name: f.name, type: f.type || "text", placeholder: f.placeholder || "", step: f.step,
                     size: f.size || 10 });
    input.dataset.testid = `filter-${f.name}`;
    return [f, input];
  });
  const values = () => Object.fromEntries(
    inputs.map(([f, input]) => [f.name, input.value.trim()]).filter(([, v]) => v !== ""));
  const form = h("form", { class: "filters", testid, onsubmit: (e) => e.preventDefault() },
    inputs.map(([f, input]) => h("label", {}, h("span", {}, f.label), input)));
  form.addEventListener("change", () => onChange(values()));
  return form;
}
