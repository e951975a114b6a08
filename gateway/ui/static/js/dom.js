// DOM building and formatting. Every string from the API is agent output and untrusted: it only
// ever goes into text nodes and attribute values, never into HTML parsing.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.setAttribute("class", value);
    else if (key === "testid") el.dataset.testid = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style") Object.assign(el.style, value); // CSSOM: allowed by the page's CSP
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/** Appends children: nodes, strings (as text), arrays of either; null and undefined are skipped. */
function append(parent, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** h("a", {href, class, testid, onclick}, ...children): an HTML element. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element (charts). */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

// --- links -------------------------------------------------------------------------------------

export const href = {
  runs: () => "#/runs",
  run: (name) => `#/runs/${encodeURIComponent(name)}`,
  group: (id) => `#/groups/${id}`,
  rollout: (id) => `#/rollouts/${id}`,
  call: (id) => `#/calls/${id}`,
  policies: () => "#/policies",
  policy: (name) => `#/policies/${encodeURIComponent(name)}`,
};

export function link(url, text, attrs = {}) {
  return h("a", { href: url, ...attrs }, text);
}

/** A link to a call, or a dash when there is none. */
export function callLink(id, attrs = {}) {
  return id === null || id === undefined ? dash() : link(href.call(id), `#${id}`, attrs);
}

// --- formatting --------------------------------------------------------------------------------

export function dash() {
  return h("span", { class: "muted" }, "–");
}

export function fmtNum(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  return value.toLocaleString("en-US", { maximumFractionDigits: digits });
}

export function fmtPct(value) {
  return value === null || value === undefined ? "–" : `${(100 * value).toFixed(1)}%`;
}

export function fmtTime(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  // sv-SE writes local time as "2026-01-31 13:05:09": unambiguous and sortable.
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString("sv-SE");
}

export function fmtDuration(startIso, endIso) {
  if (!startIso || !endIso) return "–";
  const seconds = (new Date(endIso) - new Date(startIso)) / 1000;
  if (!Number.isFinite(seconds)) return "–";
  return seconds < 120 ? `${seconds.toFixed(1)} s` : `${(seconds / 60).toFixed(1)} min`;
}

export function badge(status) {
  return h("span", { class: `badge status-${String(status).replace(/[^a-z_-]/gi, "")}` }, status);
}

export function tagList(tags) {
  if (!tags || !tags.length) return dash();
  return h("span", { testid: "tags" }, tags.map((tag) => h("span", { class: "tag" }, tag)));
}

/** A definition list from [label, value] pairs (value: text or node). */
export function facts(pairs, attrs = {}) {
  return h("dl", { class: "facts", ...attrs },
    pairs.filter(Boolean).map(([label, value]) => [h("dt", {}, label), h("dd", {}, value)]));
}

export function section(title, ...children) {
  return h("section", { class: "card" }, h("h2", {}, title), ...children);
}

export function errorBox(error) {
  return h("div", { class: "error", testid: "error", role: "alert" }, String(error.message || error));
}

/** Background colour of a reward: red (low) to green (high) on the [lo, hi] scale. */
export function rewardColor(reward, lo = 0, hi = 1) {
  if (reward === null || reward === undefined) return null;
  const t = hi > lo ? Math.min(1, Math.max(0, (reward - lo) / (hi - lo))) : 0.5;
  return `hsl(${Math.round(120 * t)}, 65%, 82%)`;
}
