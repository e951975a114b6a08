"""A run in numbers: rollouts, rewards per policy version, call-graph and token totals.

SQL aggregates only; no row of the run is loaded. The call totals read only columns of the
covering index ``ix_calls_rollout_stats`` (migration 0005), so on SQLite they never touch the
table's rows, whose token blobs spill onto overflow pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Float, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.listings import is_main_call
from store.tables import Call, Group, LearnerStep, Rollout


async def _summary(session: AsyncSession, run_id: int) -> dict:
    rollouts_by_status = await _counts(session, Rollout.status, Rollout.run_id == run_id)
    calls = await _call_totals(session, run_id)
    return {
        "rollouts": sum(rollouts_by_status.values()),
        "rollouts_by_status": rollouts_by_status,
        "groups_by_status": await _counts(session, Group.status, Group.run_id == run_id),
        "reward_mean": await session.scalar(select(func.avg(Rollout.reward)).where(Rollout.run_id == run_id)),
        "reward_by_version": await _reward_by_version(session, run_id),
        **calls,
        "fork_rate": calls["forks"] / calls["calls"] if calls["calls"] else None,
        "extension_rate": calls["extending_turns"] / calls["later_turns"] if calls["later_turns"] else None,
        "learner_steps": await session.scalar(
            select(func.count()).select_from(LearnerStep).where(LearnerStep.run_id == run_id)
        ),
    }


async def _counts(session: AsyncSession, column, where) -> dict[str, int]:
    rows = (await session.execute(select(column, func.count()).where(where).group_by(column))).all()
    return {value: n for value, n in rows}


async def _call_totals(session: AsyncSession, run_id: int) -> dict[str, int]:
    untagged = is_main_call()
    query = select(
        func.count(),
        func.count().filter(~untagged),
        func.count().filter(Call.parent_id.is_(None)),
        func.count(Call.fork_of),
        func.coalesce(func.sum(Call.drift_tokens), 0),
        func.coalesce(func.sum(Call.num_prompt_tokens), 0),
        func.coalesce(func.sum(Call.num_output_tokens), 0),
        func.count().filter(untagged),
        func.count(func.distinct(Call.rollout_id)).filter(untagged),
        func.count().filter(untagged & Call.parent_id.is_not(None)),
    ).where(Call.rollout_id.in_(_run_rollout_ids(run_id)))
    row = (await session.execute(query)).one()
    names = ("calls", "side_calls", "roots", "forks", "drift_tokens", "prompt_tokens", "output_tokens")
    totals = {name: int(value) for name, value in zip(names, row)}
    main_calls, rollouts_calling, extending = (int(value) for value in row[len(names) :])
    # A rollout's later main-loop turns, and those whose prompt extends an earlier call's prompt and
    # output exactly (a parent in the call graph); the others re-rendered history (forks, drift).
    return {**totals, "later_turns": main_calls - rollouts_calling, "extending_turns": extending}


def pinned_versions(run_id: int):
    """Subquery (rollout_id, version): the policy version each rollout of the run was served by, the
    lowest among its calls (a rollout is pinned to the version current when it started)."""
    return (
        select(Call.rollout_id, func.min(Call.policy_version).label("version"))
        .where(Call.rollout_id.in_(_run_rollout_ids(run_id)))
        .group_by(Call.rollout_id)
        .subquery()
    )


@dataclass(frozen=True)
class VersionRewards:
    """The rollouts one policy version served (a rollout counts under the version it was pinned to)."""

    version: int
    rollouts: int  # every rollout pinned to it, scored or not
    scored: int  # those with a reward
    reward_mean: float | None  # over the scored ones (None: none scored)
    reward_square_mean: float | None  # E[reward^2] over the scored ones, for their spread


async def rewards_by_version(session: AsyncSession, run_id: int) -> list[VersionRewards]:
    """Per policy version, oldest first: the one definition the run summary and the report read."""
    version = pinned_versions(run_id)
    reward = cast(Rollout.reward, Float)
    query = (
        select(version.c.version, func.count(), func.count(Rollout.reward), func.avg(reward), func.avg(reward * reward))
        .join(Rollout, Rollout.id == version.c.rollout_id)
        .group_by(version.c.version)
        .order_by(version.c.version)
    )
    return [
        VersionRewards(int(v), int(n), int(scored), _float(mean), _float(square))
        for v, n, scored, mean, square in (await session.execute(query)).all()
    ]


def _float(value) -> float | None:
    return None if value is None else float(value)


async def _reward_by_version(session: AsyncSession, run_id: int) -> list[dict]:
    return [
        {"policy_version": r.version, "rollouts": r.rollouts, "reward_mean": r.reward_mean}
        for r in await rewards_by_version(session, run_id)
    ]


def _run_rollout_ids(run_id: int):
    return select(Rollout.id).where(Rollout.run_id == run_id)


class Summaries:
    """A run's counts and totals, for its REST summary."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def run_summary(self, run_id: int) -> dict:
        """Every number of ``RunSummary`` but the run's name (one session)."""
        async with self.sessions() as session, session.begin():
            return await _summary(session, run_id)
