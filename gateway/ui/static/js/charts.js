// Line charts of learner metrics as inline SVG (no chart library, no build step).

import { fmtNum, h, s } from "./dom.js";

const W = 340, H = 150;
const PAD = { left: 46, right: 10, top: 10, bottom: 22 };
const MAX_MARKERS = 400; // one circle (with a tooltip) per step up to this many; beyond, the line only

function extent(values) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) { // a flat series still needs a visible band around it
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad; hi += pad;
  }
  return [lo, hi];
}

/** points: [{x, y: value|null}] in x order; null values leave a gap in the line. ``xName`` labels
 * the x axis ("step" for learner metrics, "v" for policy versions). */
export function lineChart(key, points, xName = "step") {
  const known = points.filter((p) => typeof p.y === "number");
  const box = h("figure", { class: "chart", testid: "chart-box", dataset: { key } }, h("figcaption", {}, key));
  if (!known.length) return box;
  const [x0, x1] = known.length > 1 ? [known[0].x, known[known.length - 1].x] : [known[0].x - 1, known[0].x + 1];
  const [y0, y1] = extent(known.map((p) => p.y));
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);

  let d = "", pen = "M";
  for (const p of points) {
    if (typeof p.y !== "number") { pen = "M"; continue; }
    d += `${pen}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`;
    pen = "L";
  }
  const markers = known.length <= MAX_MARKERS
    ? known.map((p) => s("circle", { class: "point", testid: "chart-point", cx: sx(p.x).toFixed(1),
                                     cy: sy(p.y).toFixed(1), r: 2.5 },
                         s("title", {}, `${xName} ${p.x}: ${fmtNum(p.y, 4)}`)))
    : [];
  const svg = s("svg", { class: "chart-svg", testid: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H,
                         role: "img", "aria-label": `${key} per ${xName}`,
                         dataset: { key, points: String(known.length) } },
    s("line", { class: "axis", x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom }),
    s("line", { class: "axis", x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom }),
    s("text", { class: "tick", x: PAD.left - 4, y: PAD.top + 8, "text-anchor": "end" }, fmtNum(y1, 3)),
    s("text", { class: "tick", x: PAD.left - 4, y: H - PAD.bottom, "text-anchor": "end" }, fmtNum(y0, 3)),
    s("text", { class: "tick", x: PAD.left, y: H - 6 }, `${xName} ${fmtNum(x0)}`),
    s("text", { class: "tick", x: W - PAD.right, y: H - 6, "text-anchor": "end" }, `${fmtNum(x1)}`),
    s("path", { class: "line", d }),
    markers);
  box.append(svg);
  return box;
}

// The metrics people look at first, in this order; other numeric keys go under "more metrics".
const MAIN_METRICS = ["reward_mean", "loss", "staleness_mean", "kl", "entropy", "grad_norm", "step_time_s",
                             "trained_tokens_per_s", "clip_frac_high", "swap_time_s", "mismatch_mean_abs"];
const NOT_CHARTED = new Set(["step"]);

/** The numeric metric keys of some steps: [main keys present, other keys present]. */
export function metricKeys(steps) {
  const keys = new Set();
  for (const step of steps) {
    for (const [key, value] of Object.entries(step.metrics || {})) {
      if (typeof value === "number" && !NOT_CHARTED.has(key)) keys.add(key);
    }
  }
  const main = MAIN_METRICS.filter((k) => keys.has(k));
  const rest = [...keys].filter((k) => !MAIN_METRICS.includes(k)).sort();
  return [main, rest];
}

export function seriesOf(steps, key) {
  return steps.map((st) => ({ x: st.step, y: st.metrics?.[key] ?? null }));
}
