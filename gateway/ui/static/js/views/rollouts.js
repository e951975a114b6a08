// Rollout listings (of a run, of a group) with the filters of /api/rollouts, and reward cells.

import { pager } from "../api.js";
import { badge, dash, fmtDuration, fmtNum, h, href, link, rewardColor } from "../dom.js";
import { filterBar } from "../filters.js";
import { pagedTable } from "../table.js";

const STATUSES = ["running", "finished", "failed"];

/** Reward colours on a scale that starts at [0, 1] and widens to every reward seen (rewards are unbounded). */
export class RewardScale {
  lo = 0;
  hi = 1;

  see(rewards) {
    for (const r of rewards) {
      if (typeof r !== "number") continue;
      this.lo = Math.min(this.lo, r);
      this.hi = Math.max(this.hi, r);
    }
    return this;
  }

  color(reward) {
    return rewardColor(reward, this.lo, this.hi);
  }
}

/** One rollout's reward as a coloured cell linking to it ("rewards side by side"). */
export function rewardCell(rollout, scale) {
  const text = rollout.status === "running" ? "…"
    : rollout.reward === null || rollout.reward === undefined ? "–" : fmtNum(rollout.reward, 2);
  const cell = link(href.rollout(rollout.id), rollout.status === "failed" ? `✕ ${text}` : text, {
    class: `reward-cell status-${rollout.status}`, testid: "reward-cell",
    title: `rollout ${rollout.id} · ${rollout.status} · reward ${fmtNum(rollout.reward, 4)}`,
    dataset: { rolloutId: String(rollout.id), reward: rollout.reward ?? "" },
  });
  const color = scale.color(rollout.reward);
  if (color) cell.style.backgroundColor = color;
  return cell;
}

/** baseParams: the fixed part of the query ({run} or {group_id}); the filters add the rest. */
export function rolloutList(ctx, baseParams) {
  const slot = h("div");
  const scale = new RewardScale();
  const show = (filters) => {
    const table = pagedTable({
      pages: pager("rollouts", { ...baseParams, ...filters }, ctx.signal),
      testid: "rollouts-table",
      empty: "No rollouts match.",
      onRows: (rows) => scale.see(rows.map((r) => r.reward)),
      rowAttrs: (r) => ({ testid: "rollout-row", dataset: { rolloutId: String(r.id), status: r.status } }),
      columns: [
        { label: "rollout", cell: (r) => link(href.rollout(r.id), `#${r.id}`, { testid: "rollout-link" }) },
        { label: "task", cell: (r) => r.task },
        { label: "group", cell: (r) => (r.group_id ? link(href.group(r.group_id), r.group) : r.group) },
        { label: "status", cell: (r) => badge(r.status) },
        { label: "reward", numeric: true, cell: (r) => rewardCell(r, scale) },
        { label: "harness", cell: (r) => r.meta?.harness ?? dash() },
        { label: "error", cell: (r) => (r.error ? h("span", { class: "clip", title: r.error }, r.error) : dash()) },
        { label: "duration", numeric: true, cell: (r) => fmtDuration(r.created_at, r.finished_at) },
      ],
    });
    slot.replaceChildren(table.el);
    return table.ready;
  };
  const filters = filterBar([
    { name: "status", label: "status", type: "select", options: STATUSES },
    { name: "reward_min", label: "reward ≥", type: "number", step: "any", size: 6 },
    { name: "reward_max", label: "reward ≤", type: "number", step: "any", size: 6 },
    { name: "harness", label: "harness", size: 10 },
    { name: "policy_version", label: "policy version", type: "number", step: 1, size: 4 },
    baseParams.group_id ? null : { name: "task", label: "task", size: 14 },
  ].filter(Boolean), show, "rollout-filters");
  return { el: h("div", {}, filters, slot), ready: show({}) };
}
