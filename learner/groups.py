"""Ready groups in, training batches out; groups marked consumed with the checkpoint that covers them.

Order and exactly-once:
- groups are read with ``status = 'ready'`` in ``(ready_at, id)`` order. Selecting by status rather
  than "after the last consumed position" means a group whose ``ready_at`` is earlier than the
  position (clock skew between gateways, a slow commit) is still trained, later, instead of skipped;
- groups trained since the last checkpoint stay ``ready`` in the store (the learner keeps them in
  memory as pending and skips them when reading); they turn ``consumed`` only in the transaction
  that records the checkpoint covering them (``commit_checkpoint``). A crash before that commit
  rolls model and groups back together: the restarted learner loads the previous checkpoint and
  reads those groups again.

Samples come from ``gateway.store.samples.build_samples`` (the samples endpoint's own logic).

A ready group the learner cannot use (a reward that is not finite, samples that cannot be built or
hold token ids the model does not have, calls sampled at another temperature than the run's) is
*quarantined*: ``status = 'quarantined'`` with the reason in ``error``, so it is never read again
and the learner goes on with the next group instead of failing on the same one forever.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from gateway.store.records import SamplingSettings
from gateway.store.rewards import CANCELLED
from gateway.store.samples import Sample, build_samples
from gateway.store.store import Store
from gateway.store.tables import Call, Group, LearnerCheckpoint, Rollout, Run
from learner.advantages import GroupAdvantages, group_advantages

QUARANTINED = "quarantined"
TEMPERATURE_TOLERANCE = 1e-6


class ConsumeConflict(RuntimeError):
    """The groups were consumed by someone else (a second learner on the same run)."""


class UnusableGroup(ValueError):
    """A ready group the learner cannot train on; the message says why (it becomes the group's error)."""


@dataclass(frozen=True)
class RolloutData:
    rollout_id: int
    reward: float | None  # None: not scored (no advantage, not trained on)
    samples: tuple[Sample, ...]  # one per root-to-leaf path of its call graph


@dataclass(frozen=True)
class ReadyGroup:
    group_id: int
    ready_at: datetime | None
    rollouts: tuple[RolloutData, ...]
    temperatures: tuple[float, ...] = ()  # the distinct temperatures its calls recorded (none: not recorded)


@dataclass(frozen=True)
class TrainSample:
    sample: Sample
    advantage: float  # its rollout's group-standardised reward
    staleness: int  # learner version - the oldest version that sampled one of its tokens
    group_id: int
    rollout_id: int


@dataclass(frozen=True)
class Batch:
    groups: tuple[ReadyGroup, ...]  # every group read, trained on or not: all are consumed
    samples: tuple[TrainSample, ...]  # what is trained on
    advantages: GroupAdvantages  # per group, with the reward and zero-std counts
    samples_read: int  # samples with at least one sampled token, in every group
    samples_stale: int  # dropped: more than max_staleness versions behind
    samples_unscored: int  # dropped: their group was zero-std or empty, or their rollout unscored
    samples_empty: int  # dropped: no sampled token (nothing to learn from)
    staleness: tuple[int, ...]  # of every sample read (how old the incoming data is)
    temperature: float = 1.0  # the run's sampling temperature: the learner's log-probs are taken at it

    @property
    def group_ids(self) -> tuple[int, ...]:
        return tuple(g.group_id for g in self.groups)


@dataclass(frozen=True)
class CheckpointRecord:
    step: int
    version: int
    path: str
    group_ids: tuple[int, ...]  # consumed by this checkpoint (since the previous one)
    last_ready_at: datetime | None = None
    last_group_id: int | None = None


# --- reading -----------------------------------------------------------------------------------


async def find_run_id(store: Store, run: str) -> int | None:
    async with store.sessions() as session:
        return await session.scalar(select(Run.id).where(Run.name == run))


async def ready_group_ids(store: Store, run_id: int, limit: int, exclude: Collection[int] = ()) -> list[int]:
    """The first ``limit`` ready groups of the run in (ready_at, id) order, skipping ``exclude``."""
    query = (select(Group.id).where(Group.run_id == run_id, Group.status == "ready")
             .order_by(Group.ready_at, Group.id).limit(limit + len(exclude)))
    async with store.sessions() as session:
        ids = list((await session.scalars(query)).all())
    return [i for i in ids if i not in exclude][:limit]


async def run_temperature(store: Store, run_id: int) -> float | None:
    """The temperature the run samples at (its fixed sampling); None for a run from before it was fixed."""
    async with store.sessions() as session:
        config = await session.scalar(select(Run.config).where(Run.id == run_id))
    sampling = SamplingSettings.from_config((config or {}).get("sampling"))
    return None if sampling is None else sampling.temperature


async def load_group(store: Store, group_id: int, include_side: bool = False) -> ReadyGroup:
    """A group's rollouts (by id; cancelled ones are no members) with their rewards and samples.

    UnusableGroup when a rollout's calls do not make samples (the store holds something broken).
    """
    members = (select(Rollout.id, Rollout.reward).where(Rollout.group_id == group_id, Rollout.status != CANCELLED)
               .order_by(Rollout.id))
    temperatures = (select(Call.temperature).distinct().join(Rollout, Rollout.id == Call.rollout_id)
                    .where(Rollout.group_id == group_id, Rollout.status != CANCELLED, Call.temperature.is_not(None)))
    async with store.sessions() as session:
        ready_at = await session.scalar(select(Group.ready_at).where(Group.id == group_id))
        rows = (await session.execute(members)).all()
        recorded = tuple(sorted((await session.scalars(temperatures)).all()))
    rollouts = []
    for rollout_id, reward in rows:
        try:
            samples = build_samples(await store.call_nodes(rollout_id), include_side)
        except (ValueError, IndexError) as exc:
            raise UnusableGroup(f"rollout {rollout_id}: its calls make no samples: {exc}") from None
        rollouts.append(RolloutData(rollout_id, reward, tuple(samples)))
    return ReadyGroup(group_id, ready_at, tuple(rollouts), recorded)


def check_group(group: ReadyGroup, temperature: float, vocab_size: int | None = None) -> None:
    """UnusableGroup unless the learner can train on the group: its rewards pass the advantage checks,
    its calls sampled at ``temperature``, its samples are consistent and in the model's vocabulary."""
    try:
        group_advantages([[r.reward for r in group.rollouts]])
    except (ValueError, TypeError) as exc:
        raise UnusableGroup(f"its rewards cannot be used: {exc}") from None
    other = [t for t in group.temperatures if abs(t - temperature) > TEMPERATURE_TOLERANCE]
    if other:
        raise UnusableGroup(f"its calls sampled at temperature {other[0]:g}, but the run's log-probs are taken "
                            f"at {temperature:g}")
    for rollout in group.rollouts:
        for sample in rollout.samples:
            problem = _sample_problem(sample, vocab_size)
            if problem:
                raise UnusableGroup(f"rollout {rollout.rollout_id}, sample of calls {list(sample.call_ids)}: {problem}")


def _sample_problem(sample: Sample, vocab_size: int | None) -> str | None:
    length = len(sample.input_ids)
    if any(len(a) != length for a in (sample.loss_mask, sample.old_logprobs, sample.policy_versions)):
        return "its token, mask, logprob and version arrays differ in length"
    if length and (sample.input_ids.min() < 0 or (vocab_size is not None and sample.input_ids.max() >= vocab_size)):
        return f"a token id outside the model's vocabulary of {vocab_size}"
    if not np.isin(sample.loss_mask, (0, 1)).all():
        return "its loss mask holds values other than 0 and 1"
    return None


async def quarantine_group(store: Store, run_id: int, group_id: int, reason: str) -> bool:
    """Mark a ready group quarantined with ``reason``; False when it was no longer ready."""
    async with store.sessions.begin() as session:
        done = await session.execute(
            update(Group).where(Group.id == group_id, Group.run_id == run_id, Group.status == "ready")
            .values(status=QUARANTINED, error=reason[:2000]))
    return done.rowcount == 1


async def read_ready_groups(store: Store, run_id: int, limit: int, exclude: Collection[int] = (),
                            include_side: bool = False) -> list[ReadyGroup]:
    return [await load_group(store, gid, include_side) for gid in await ready_group_ids(store, run_id, limit, exclude)]


# --- batches (pure) ----------------------------------------------------------------------------


def sample_version(sample: Sample) -> int | None:
    """The oldest policy version that sampled a token of the sample; None when nothing was sampled."""
    versions = sample.policy_versions[np.asarray(sample.loss_mask).astype(bool)]
    return int(versions.min()) if versions.size else None


def build_batch(groups: Sequence[ReadyGroup], learner_version: int, max_staleness: int,
                scale_by_std: bool = True, temperature: float = 1.0) -> Batch:
    """Advantages per group, then the samples worth training: scored, non-empty, fresh enough.

    Advantages use every scored rollout of a group, stale or not: a reward is a fact about the task
    whichever policy earned it, so the group's baseline stays the mean of all G rollouts.
    """
    advantages = group_advantages([[r.reward for r in g.rollouts] for g in groups], scale_by_std=scale_by_std)
    kept: list[TrainSample] = []
    staleness: list[int] = []
    stale = unscored = empty = 0
    for group, group_adv in zip(groups, advantages.advantages):
        for rollout, advantage in zip(group.rollouts, group_adv):
            for sample in rollout.samples:
                version = sample_version(sample)
                if version is None:
                    empty += 1
                    continue
                age = learner_version - version
                staleness.append(age)
                if advantage is None:
                    unscored += 1
                elif age > max_staleness:
                    stale += 1
                else:
                    kept.append(TrainSample(sample, advantage, age, group.group_id, rollout.rollout_id))
    return Batch(tuple(groups), tuple(kept), advantages, len(staleness), stale, unscored, empty, tuple(staleness),
                 temperature)


# --- checkpoints and consumption ---------------------------------------------------------------


async def commit_checkpoint(store: Store, run_id: int, record: CheckpointRecord) -> None:
    """Record a fully written checkpoint and mark the groups it covers consumed, in one transaction.

    Raises ConsumeConflict (and changes nothing) when a group is no longer ready or the step is
    already recorded: another learner is training this run.
    """
    ids = list(record.group_ids)
    try:
        async with store.sessions.begin() as session:
            session.add(LearnerCheckpoint(
                run_id=run_id, step=record.step, version=record.version, path=record.path, group_ids=ids,
                last_ready_at=record.last_ready_at, last_group_id=record.last_group_id))
            await session.flush()
            if ids:
                done = await session.execute(
                    update(Group).where(Group.id.in_(ids), Group.run_id == run_id, Group.status == "ready")
                    .values(status="consumed"))
                if done.rowcount != len(set(ids)):
                    raise ConsumeConflict(f"of groups {ids}, only {done.rowcount} were still ready: "
                                          f"is another learner training this run?")
    except IntegrityError:
        raise ConsumeConflict(f"step {record.step} of this run is already checkpointed: "
                              f"is another learner training this run?") from None


async def latest_checkpoint(store: Store, run_id: int) -> CheckpointRecord | None:
    """The newest committed checkpoint of the run (the only one a restart may load)."""
    query = (select(LearnerCheckpoint).where(LearnerCheckpoint.run_id == run_id)
             .order_by(LearnerCheckpoint.step.desc()).limit(1))
    async with store.sessions() as session:
        row = await session.scalar(query)
    if row is None:
        return None
    return CheckpointRecord(row.step, row.version, row.path, tuple(row.group_ids), row.last_ready_at, row.last_group_id)


async def consumed_history(store: Store, run_id: int) -> list[CheckpointRecord]:
    """Every committed checkpoint of the run, oldest first (which groups each one consumed)."""
    query = select(LearnerCheckpoint).where(LearnerCheckpoint.run_id == run_id).order_by(LearnerCheckpoint.step)
    async with store.sessions() as session:
        rows = (await session.scalars(query)).all()
    return [CheckpointRecord(r.step, r.version, r.path, tuple(r.group_ids), r.last_ready_at, r.last_group_id)
            for r in rows]
