"""Ending rollouts, adding up their rewards, and marking groups ready.

Rewards come from the task's verifier, Python reward functions and ``POST /api/rollouts/{id}/reward``;
each is a named component (None allowed: "no opinion"). A group is ready once it has all of its
``size`` rollouts and every one of them has ended; the learner then reads ready groups in order.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.store.tables import Group, Rollout, utcnow

ENDED = ("finished", "failed")


def total_reward(components: dict[str, float | None]) -> float | None:
    values = [v for v in components.values() if v is not None]
    return float(sum(values)) if values else None


async def add_reward(session: AsyncSession, rollout: Rollout, name: str, value: float | None) -> None:
    rollout.rewards = {**(rollout.rewards or {}), name: value}
    rollout.reward = total_reward(rollout.rewards)
    await session.flush()


async def end_rollout(session: AsyncSession, rollout: Rollout, status: str, error: str | None) -> None:
    if status not in ENDED:
        raise ValueError(f"a rollout ends as one of {ENDED}, not {status!r}")
    rollout.status, rollout.error, rollout.finished_at = status, error, utcnow()
    await session.flush()
    await mark_group_if_ready(session, rollout.group_id)


async def mark_group_if_ready(session: AsyncSession, group_id: int) -> bool:
    """Open -> ready when the group has ``size`` rollouts and none is still running."""
    group = await session.get(Group, group_id, with_for_update=True)
    if group is None or group.size is None or group.status != "open":
        return False
    counts = select(func.count(Rollout.id), func.count(Rollout.id).filter(Rollout.status.in_(ENDED))).where(
        Rollout.group_id == group_id)
    total, ended = (await session.execute(counts)).one()
    if total < group.size or ended < total:
        return False
    await session.execute(update(Group).where(Group.id == group_id, Group.status == "open")
                          .values(status="ready", ready_at=utcnow()))
    return True
