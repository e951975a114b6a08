// #/groups/ID: one GRPO group: its rollouts' rewards side by side, then its rollouts in a list.

import { get } from "../api.js";
import { badge, facts, fmtNum, fmtTime, h, href, link, section } from "../dom.js";
import { rewardCell, RewardScale, rolloutList } from "./rollouts.js";

function rewardStats(rollouts) {
  const rewards = rollouts.map((r) => r.reward).filter((r) => typeof r === "number");
  if (!rewards.length) return "–";
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, b) => a + (b - mean) ** 2, 0) / rewards.length);
  // Zero spread means no learning signal for GRPO: worth seeing at a glance.
  return `mean ${fmtNum(mean, 4)} · std ${fmtNum(std, 4)}${std === 0 ? " (no signal)" : ""}`;
}

export async function groupView(ctx, id) {
  const group = await get(`groups/${id}`, {}, ctx.signal);
  ctx.crumbs([["runs", href.runs()], [group.run, href.run(group.run)], [`group #${group.id}`, href.group(group.id)]]);
  const members = group.rollouts || [];
  const scale = new RewardScale().see(members.map((r) => r.reward));
  const rollouts = rolloutList(ctx, { group_id: group.id });
  ctx.show(
    h("h1", {}, `Group #${group.id} `, h("span", { class: "muted" }, group.name)),
    section("Group",
      facts([
        ["run", link(href.run(group.run), group.run)],
        ["task", group.task],
        ["status", h("span", { testid: "group-status" }, badge(group.status))],
        ["size", fmtNum(group.size)],
        ["rewards", h("span", { class: "reward-row", testid: "group-rewards" }, members.map((r) => rewardCell(r, scale)))],
        ["spread", rewardStats(members)],
        ["created", fmtTime(group.created_at)],
        ["ready", fmtTime(group.ready_at)],
      ], { testid: "group-header" })),
    section("Rollouts", rollouts.el));
  await rollouts.ready;
}
