"""The learner's side of the store: ready groups to train, quarantine, checkpoints that consume groups,
and the per-step metrics every reader (learner, dashboard, report) takes from one place.

Exactly-once: groups trained since the last checkpoint stay ``ready``; they turn ``consumed`` only in
the transaction that records the checkpoint covering them (``commit_checkpoint``), so a crash rolls
model and groups back together.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.records import GroupStatus, SamplingSettings
from store.rewards import CANCELLED
from store.tables import Adapter, Call, Group, LearnerCheckpoint, LearnerStep, Rollout, Run

READY, CONSUMED = GroupStatus.READY, GroupStatus.CONSUMED
QUARANTINED = GroupStatus.QUARANTINED


class ConsumeConflict(RuntimeError):
    """The groups were consumed by someone else (a second learner on the same run)."""


@dataclass(frozen=True)
class GroupMembers:
    group_id: int
    ready_at: datetime | None
    rewards: tuple[tuple[int, float | None], ...]  # (rollout id, reward) of each member, by id; cancelled: none
    temperatures: tuple[float, ...]  # the distinct temperatures its calls recorded (none: not recorded)
    teachers: tuple[str, ...] = ()  # external models that served members (meta.teacher): no sampler logprobs
    # calls whose adapter is not the one published as their version: (version, the digest the call
    # recorded (None: none), the version's published digest), distinct (contracts.adapter_proof)
    foreign_adapters: tuple[tuple[int, str | None, str], ...] = ()
    users: tuple[str, ...] = ()  # per member: the live key's user of a session (meta.live.user), "" else


@dataclass(frozen=True)
class CheckpointRecord:
    step: int
    version: int
    path: str
    group_ids: tuple[int, ...]  # consumed by this checkpoint (since the previous one)
    last_ready_at: datetime | None = None
    last_group_id: int | None = None


# --- groups ------------------------------------------------------------------------------------


# --- checkpoints -------------------------------------------------------------------------------


def _checkpoint(row: LearnerCheckpoint) -> CheckpointRecord:
    return CheckpointRecord(row.step, row.version, row.path, tuple(row.group_ids), row.last_ready_at, row.last_group_id)


# --- step metrics ------------------------------------------------------------------------------


class Training:
    """The learner's side of the store (this module's docstring)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def ready_group_ids(self, run_id: int, limit: int, exclude: Collection[int] = ()) -> list[int]:
        """The first ``limit`` ready groups of the run in (ready_at, id) order, skipping ``exclude``.

        By status, not "after the last consumed position": a group whose ``ready_at`` is earlier than the
        position (clock skew between gateways, a slow commit) is still trained, later, instead of skipped.
        """
        query = (
            select(Group.id)
            .where(Group.run_id == run_id, Group.status == READY)
            .order_by(Group.ready_at, Group.id)
            .limit(limit + len(exclude))
        )
        async with self.sessions() as session:
            ids = list((await session.scalars(query)).all())
        return [i for i in ids if i not in exclude][:limit]

    async def run_sampling(self, run_id: int) -> SamplingSettings | None:
        """The run's fixed sampling; None for a run from before it was fixed."""
        async with self.sessions() as session:
            config = await session.scalar(select(Run.config).where(Run.id == run_id))
        return SamplingSettings.from_config((config or {}).get("sampling"))

    async def group_members(self, group_id: int) -> GroupMembers:
        """A group's rollouts with their rewards, and the temperatures its calls were sampled at."""
        members = (
            select(Rollout.id, Rollout.reward, Rollout.meta)
            .where(Rollout.group_id == group_id, Rollout.status != CANCELLED)
            .order_by(Rollout.id)
        )
        temperatures = (
            select(Call.temperature)
            .distinct()
            .join(Rollout, Rollout.id == Call.rollout_id)
            .where(Rollout.group_id == group_id, Rollout.status != CANCELLED, Call.temperature.is_not(None))
        )
        foreign = (
            select(Call.policy_version, Call.adapter_digest, Adapter.digest)
            .distinct()
            .join(Rollout, Rollout.id == Call.rollout_id)
            .join(Adapter, and_(Adapter.policy == Call.policy, Adapter.version == Call.policy_version))
            .where(Rollout.group_id == group_id, Rollout.status != CANCELLED, Adapter.digest.is_not(None))
            .where(or_(Call.adapter_digest.is_(None), Call.adapter_digest != Adapter.digest))
        )
        async with self.sessions() as session:
            ready_at = await session.scalar(select(Group.ready_at).where(Group.id == group_id))
            rows = (await session.execute(members)).all()
            recorded = tuple(sorted((await session.scalars(temperatures)).all()))
            mismatched = tuple(tuple(r) for r in (await session.execute(foreign)).all())
        teachers = tuple(sorted({str(r[2]["teacher"]) for r in rows if isinstance(r[2], dict) and r[2].get("teacher")}))
        users = tuple(str(((r[2] or {}).get("live") or {}).get("user", "")) for r in rows)
        return GroupMembers(
            group_id, ready_at, tuple((r[0], r[1]) for r in rows), recorded, teachers, mismatched, users
        )

    async def quarantine_group(self, run_id: int, group_id: int, reason: str) -> bool:
        """Mark a ready group quarantined with ``reason``; False when it was no longer ready."""
        async with self.sessions.begin() as session:
            done = await session.execute(
                update(Group)
                .where(Group.id == group_id, Group.run_id == run_id, Group.status == READY)
                .values(status=QUARANTINED, error=reason[:2000])
            )
        return done.rowcount == 1

    async def commit_checkpoint(self, run_id: int, record: CheckpointRecord) -> None:
        """Record a fully written checkpoint and mark the groups it covers consumed, in one transaction.

        Raises ConsumeConflict (and changes nothing) when a group is no longer ready or the step is
        already recorded: another learner is training this run.
        """
        ids = list(record.group_ids)
        try:
            async with self.sessions.begin() as session:
                session.add(
                    LearnerCheckpoint(
                        run_id=run_id,
                        step=record.step,
                        version=record.version,
                        path=record.path,
                        group_ids=ids,
                        last_ready_at=record.last_ready_at,
                        last_group_id=record.last_group_id,
                    )
                )
                await session.flush()
                if ids:
                    done = await session.execute(
                        update(Group)
                        .where(Group.id.in_(ids), Group.run_id == run_id, Group.status == READY)
                        .values(status=CONSUMED)
                    )
                    if done.rowcount != len(set(ids)):
                        raise ConsumeConflict(
                            f"of groups {ids}, only {done.rowcount} were still ready: is another learner training this run?"
                        )
        except IntegrityError:
            raise ConsumeConflict(
                f"step {record.step} of this run is already checkpointed: is another learner training this run?"
            ) from None

    async def latest_checkpoint(self, run_id: int) -> CheckpointRecord | None:
        """The newest committed checkpoint of the run (the only one a restart may load)."""
        query = (
            select(LearnerCheckpoint)
            .where(LearnerCheckpoint.run_id == run_id)
            .order_by(LearnerCheckpoint.step.desc())
            .limit(1)
        )
        async with self.sessions() as session:
            row = await session.scalar(query)
        return None if row is None else _checkpoint(row)

    async def checkpoints(self, run_id: int) -> list[CheckpointRecord]:
        """Every committed checkpoint of the run, oldest first (which groups each one consumed)."""
        query = select(LearnerCheckpoint).where(LearnerCheckpoint.run_id == run_id).order_by(LearnerCheckpoint.step)
        async with self.sessions() as session:
            return [_checkpoint(row) for row in (await session.scalars(query)).all()]

    async def record_step(self, run_id: int, step: int, metrics: dict) -> None:
        """Store a step's metrics; a step replayed after a crash overwrites its row."""
        async with self.sessions.begin() as session:
            await session.execute(delete(LearnerStep).where(LearnerStep.run_id == run_id, LearnerStep.step == step))
            session.add(LearnerStep(run_id=run_id, step=step, metrics=metrics))

    async def learner_steps(self, run_id: int) -> list[tuple[int, dict]]:
        """Every stored step of the run as (step, metrics), in step order."""
        query = (
            select(LearnerStep.step, LearnerStep.metrics).where(LearnerStep.run_id == run_id).order_by(LearnerStep.step)
        )
        async with self.sessions() as session:
            return [(step, metrics or {}) for step, metrics in (await session.execute(query)).all()]
