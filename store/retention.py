"""Retention: delete ended rollouts (and their calls) by run, age or status (`harnessrl db prune`).

What the learner still needs is never deleted: rollouts that are running, and every rollout of a group
that is not consumed yet (a ready group's members are its training data). Rollouts go with all their
calls (a call's request may be a delta against an earlier call of the same rollout, see
``request_delta``); groups, tasks and runs left without rollouts go too, and a run pruned whole takes
its learner steps and checkpoint records with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.records import ENDED, GroupStatus, RolloutStatus
from store.tables import Call, CallMismatch, Group, LearnerCheckpoint, LearnerStep, LiveKey, Rollout, Run, Task

STATUSES = ENDED
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
KEEP_GROUPS = (
    GroupStatus.OPEN,
    GroupStatus.READY,
)  # a group still filling or waiting for the learner keeps its rollouts
BATCH = 500  # rollouts deleted per transaction: a big prune never holds one long lock


@dataclass(frozen=True)
class PruneFilter:
    run: str | None = None
    ended_before: datetime | None = None  # rollouts that ended before this (UTC)
    status: str | None = None  # finished | failed | cancelled
    task: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise ValueError(
                f"--status is one of {', '.join(STATUSES)} (running rollouts are never pruned); got {self.status!r}"
            )


def parse_age(age: str, now: datetime | None = None) -> datetime:
    """``7d`` / ``12h`` / ``30m`` / ``90s`` before now, as the UTC cutoff; ValueError naming the form."""
    match = re.fullmatch(r"(\d+)([smhd])", age.strip())
    if match is None:
        raise ValueError(f"--older-than takes a number and a unit (s, m, h, d), like 7d or 12h; got {age!r}")
    return (now or datetime.now(UTC)) - timedelta(seconds=int(match[1]) * AGE_UNITS[match[2]])


@dataclass(frozen=True)
class PruneResult:
    rollouts: int  # deleted
    calls: int  # deleted
    kept_for_learner: int  # matched, but in a group the learner has not consumed
    dry_run: bool = False


def _held():
    """Groups a learner may still train: filling or ready, with a size (a group without one, as a live
    key's session, never becomes ready, so nothing waits for it)."""
    return Group.status.in_(KEEP_GROUPS) & Group.size.is_not(None)


def _matching(where: PruneFilter):
    query = (
        select(Rollout.id)
        .join(Group, Group.id == Rollout.group_id)
        .where(Rollout.status != RolloutStatus.RUNNING)
        .order_by(Rollout.id)
    )
    if where.run is not None:
        query = query.join(Run, Run.id == Rollout.run_id).where(Run.name == where.run)
    if where.ended_before is not None:
        query = query.where(Rollout.finished_at < where.ended_before)
    if where.status is not None:
        query = query.where(Rollout.status == where.status)
    if where.task is not None:
        query = query.join(Task, Task.id == Rollout.task_id).where(Task.name == where.task)
    return query


class Retention:
    """Pruning what a filter names."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def prune(self, where: PruneFilter, dry_run: bool = False) -> PruneResult:
        """Delete the ended rollouts ``where`` selects, with their calls; return what went (or would go)."""
        matched = _matching(where)
        async with self.sessions() as session:
            kept = await session.scalar(select(func.count()).select_from(matched.where(_held()).subquery()))
        deletable = matched.where(~_held())
        if dry_run:
            async with self.sessions() as session:
                ids = list((await session.scalars(deletable)).all())
                calls = await session.scalar(select(func.count()).where(Call.rollout_id.in_(ids))) if ids else 0
            return PruneResult(len(ids), calls or 0, kept or 0, dry_run=True)
        rollouts = calls = 0
        while True:
            async with self.sessions.begin() as session:
                ids = list((await session.scalars(deletable.limit(BATCH))).all())
                if not ids:
                    break
                # Children first: parent_id and fork_of point at calls of the same rollout.
                await session.execute(
                    Call.__table__.update().where(Call.rollout_id.in_(ids)).values(parent_id=None, fork_of=None)
                )
                their_calls = select(Call.id).where(Call.rollout_id.in_(ids))
                await session.execute(delete(CallMismatch).where(CallMismatch.call_id.in_(their_calls)))
                calls += (await session.execute(delete(Call).where(Call.rollout_id.in_(ids)))).rowcount
                rollouts += (await session.execute(delete(Rollout).where(Rollout.id.in_(ids)))).rowcount
        await self._drop_empty(where.run)
        return PruneResult(rollouts, calls, kept or 0)

    async def _drop_empty(self, run: str | None) -> None:
        """Groups and tasks without rollouts, then (when pruning one run) the run if nothing is left
        (a live key still sending its sessions there keeps it)."""
        async with self.sessions.begin() as session:
            no_rollouts = ~exists().where(Rollout.group_id == Group.id)
            await session.execute(delete(Group).where(no_rollouts, ~_held()))
            await session.execute(
                delete(Task).where(
                    ~exists().where(Group.task_id == Task.id), ~exists().where(Rollout.task_id == Task.id)
                )
            )
            if run is None:
                return
            run_id = await session.scalar(select(Run.id).where(Run.name == run))
            if run_id is None or await session.scalar(
                select(exists().where(Task.run_id == run_id) | exists().where(LiveKey.run_id == run_id))
            ):
                return
            for table in (LearnerStep, LearnerCheckpoint):
                await session.execute(delete(table).where(table.run_id == run_id))
            await session.execute(delete(Run).where(Run.id == run_id))
