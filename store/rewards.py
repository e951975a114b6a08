"""Ending rollouts, adding up their rewards, and marking groups ready.

Rewards come from the task's verifier, Python reward functions and ``POST /api/rollouts/{id}/reward``;
each is a named component (None allowed: "no opinion"), a finite number otherwise: NaN or infinity
would only crash the learner later; so is their sum (a component that would take it past the
largest float is refused). Rewards are final once a rollout has ended. A group is ready once
it has all of its ``size`` rollouts and every one of them has ended; a rollout *cancelled* (ended
without a result, e.g. interrupted) frees its place for a replacement and never counts. The learner
then reads ready groups in order; one it cannot use it marks ``quarantined`` (``learner.groups``).
"""

from __future__ import annotations

import math

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from store.records import ENDED, GroupStatus, RolloutStatus
from store.tables import Group, Rollout, utcnow

CANCELLED = RolloutStatus.CANCELLED
VERIFIER = "verifier"  # the verifier's component and detail, as the runner records them (harnesses/grading/verify.py)


class InvalidReward(ValueError):
    """A reward that is not a finite number (nor None)."""


class RolloutEnded(ValueError):
    """The rollout has already ended: it cannot end twice, and its rewards are final."""


class GroupClosed(ValueError):
    """The group already has all of its rollouts, or has become ready: it takes no more."""


def check_reward(name: str, value: float | None) -> float | None:
    """The reward as stored, or InvalidReward naming the component."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidReward(f"reward {name!r} is {value!r}: rewards are finite numbers, or null for no opinion")
    return float(value)


def check_rewards(components: dict[str, float | None]) -> dict[str, float | None]:
    return {name: check_reward(name, value) for name, value in components.items()}


def total_reward(components: dict[str, float | None]) -> float | None:
    """The sum of the components (None: none has an opinion), or InvalidReward naming them when the sum
    is not finite: two finite rewards near 1.8e308 add up to infinity, which no learner can use."""
    values = [v for v in components.values() if v is not None]
    if not values:
        return None
    total = float(sum(values))
    if not math.isfinite(total):
        named = ", ".join(f"{name!r} = {value!r}" for name, value in components.items() if value is not None)
        raise InvalidReward(
            f"the rewards {named} add up to {total!r}, beyond the largest float: the total of a "
            f"rollout's rewards is a finite number; scale them down"
        )
    return total


def verifier_metrics(reward_details: dict | None) -> dict[str, float]:
    """The metrics the verifier recorded beside its reward (reward.json's other numbers), {} without."""
    metrics = ((reward_details or {}).get(VERIFIER) or {}).get("metrics")
    if not isinstance(metrics, dict):  # details are any JSON an admin client sent: read, never trusted
        return {}
    return {
        str(name): float(value)
        for name, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


async def add_reward(session: AsyncSession, rollout: Rollout, name: str, value: float | None) -> None:
    """Set one component on a running rollout (the caller holds the rollout's row)."""
    if rollout.status in ENDED:
        raise RolloutEnded(f"rollout {rollout.id} already ended as {rollout.status!r}: its rewards are final")
    set_reward(rollout, name, value)
    await session.flush()


def set_reward(rollout: Rollout, name: str, value: float | None) -> None:
    """Set one component and the total (InvalidReward, nothing changed, for a value that is not finite
    or a total that overflows). Whether the rollout may still take it is the caller's rule."""
    value = check_reward(name, value)
    rewards = {**(rollout.rewards or {}), name: value}
    rollout.reward = total_reward(rewards)  # InvalidReward first: nothing of an overflowing sum is kept
    rollout.rewards = rewards


async def end_rollout(session: AsyncSession, rollout: Rollout, status: str, error: str | None) -> None:
    if status not in ENDED:
        raise ValueError(f"a rollout ends as one of {', '.join(ENDED)}, not {status!r}")
    rollout.status, rollout.error, rollout.finished_at = status, error, utcnow()
    await session.flush()
    await mark_group_if_ready(session, rollout.group_id)


async def mark_group_if_ready(session: AsyncSession, group_id: int) -> bool:
    """Open -> ready when the group has ``size`` rollouts (cancelled ones aside) and none still runs."""
    group = await session.get(Group, group_id, with_for_update=True)
    if group is None or group.size is None or group.status != GroupStatus.OPEN:
        return False
    total, running = await _members(session, group_id)
    if total < group.size or running:
        return False
    await session.execute(
        update(Group)
        .where(Group.id == group_id, Group.status == GroupStatus.OPEN)
        .values(status=GroupStatus.READY, ready_at=utcnow())
    )
    return True


async def lock_group(session: AsyncSession, group: Group) -> None:
    """Hold the group's row until the transaction ends, and read it afresh.

    An UPDATE, as SQLite has no SELECT ... FOR UPDATE: two requests racing for a group's last place
    (or with the same request id) are then counted one after the other on both databases.
    """
    await session.execute(update(Group).where(Group.id == group.id).values(size=Group.size))
    await session.refresh(group)


async def check_group_open(session: AsyncSession, group: Group, group_size: int | None) -> None:
    """GroupClosed unless ``group`` (locked) takes one more rollout: still open, a free place, its size."""
    if group_size is not None and group.size is not None and group_size != group.size:
        raise GroupClosed(
            f"group {group.name!r} has size {group.size}, not {group_size}: a group's size is "
            f"fixed by its first rollout"
        )
    if group.status != GroupStatus.OPEN:
        raise GroupClosed(
            f"group {group.name!r} is already {group.status}: it takes no more rollouts; "
            f"create the rollout in a new group"
        )
    if group.size is not None and (await _members(session, group.id))[0] >= group.size:
        raise GroupClosed(
            f"group {group.name!r} already has its {group.size} rollouts; create the rollout in "
            f"a new group, or cancel one of them first"
        )


async def _members(session: AsyncSession, group_id: int) -> tuple[int, int]:
    """(rollouts that count, of which still running): cancelled rollouts are no members."""
    counts = select(
        func.count(Rollout.id), func.count(Rollout.id).filter(Rollout.status == RolloutStatus.RUNNING)
    ).where(Rollout.group_id == group_id, Rollout.status != CANCELLED)
    total, running = (await session.execute(counts)).one()
    return total, running
