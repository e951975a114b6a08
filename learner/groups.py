"""Ready groups in, training batches out.

The store (``store.training``) reads the ready groups in ``(ready_at, id)`` order and marks
them consumed only with the checkpoint that covers them; groups trained since the last checkpoint
stay ready and the learner keeps them in memory as pending. Samples come from
``store.samples.build_samples`` (the samples endpoint's own logic).

A ready group the learner cannot use (a reward that is not finite, samples that cannot be built or
hold token ids the model does not have, calls sampled at another temperature than the run's) is
*quarantined*: ``status = 'quarantined'`` with the reason in ``error``, so it is never read again
and the learner goes on with the next group instead of failing on the same one forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from learner.advantages import GroupAdvantages, group_advantages
from learner.echo import has_echo_targets
from store.samples import Sample, build_samples
from store.store import Store

TEMPERATURE_TOLERANCE = 1e-6


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
    teachers: tuple[str, ...] = ()  # external models that served its rollouts (harnessrl.teachers.teacher)
    # (version, digest its calls recorded, the version's published digest) where the two differ
    foreign_adapters: tuple[tuple[int, str | None, str], ...] = ()
    users: tuple[str, ...] = ()  # per rollout: a live session's user ("" for a task's rollout)


@dataclass(frozen=True)
class TrainSample:
    sample: Sample
    # its rollout's group-standardised reward; None: trained by ECHO alone (a group without reward spread,
    # or an unscored rollout, kept for its tool results when echo_weight > 0)
    advantage: float | None
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
    # the version the learner's weights are (None: they moved since it was published): tokens it
    # sampled measure the train/inference mismatch (learner.mismatch)
    version: int | None = None
    samples_echo_only: int = 0  # of ``samples``: no advantage, kept for ECHO's term on their tool results

    @property
    def group_ids(self) -> tuple[int, ...]:
        return tuple(g.group_id for g in self.groups)


# --- reading -----------------------------------------------------------------------------------


async def run_temperature(store: Store, run_id: int) -> float | None:
    """The temperature the run samples at (its fixed sampling); None for a run from before it was fixed."""
    sampling = await store.training.run_sampling(run_id)
    return None if sampling is None else sampling.temperature


async def load_group(store: Store, group_id: int, include_side: bool = False) -> ReadyGroup:
    """A group's rollouts (by id; cancelled ones are no members) with their rewards and samples.

    UnusableGroup when a rollout's calls do not make samples (the store holds something broken).
    """
    members = await store.training.group_members(group_id)
    rollouts = []
    for rollout_id, reward in members.rewards:
        try:
            samples = build_samples(await store.calls.nodes(rollout_id), include_side)
        except (ValueError, IndexError) as exc:
            raise UnusableGroup(f"rollout {rollout_id}: its calls make no samples: {exc}") from None
        rollouts.append(RolloutData(rollout_id, reward, tuple(samples)))
    return ReadyGroup(
        group_id,
        members.ready_at,
        tuple(rollouts),
        members.temperatures,
        members.teachers,
        members.foreign_adapters,
        members.users,
    )


def check_group(group: ReadyGroup, temperature: float, vocab_size: int | None = None, maxrl: bool = False) -> None:
    """UnusableGroup unless the learner can train on the group: its rewards pass the advantage checks
    (``maxrl``: MaxRL's too, rewards in [0, 1]), its calls sampled at ``temperature``, its samples are consistent
    and in the model's vocabulary."""
    if group.teachers:
        raise UnusableGroup(
            f"its rollouts were served by the teacher {group.teachers[0]}, which samples no "
            f"log-probs of the policy: train on them with `harnessrl sft`, not GRPO"
        )
    if group.foreign_adapters:
        version, served, published = group.foreign_adapters[0]
        raise UnusableGroup(
            f"calls of policy-v{version} were served by adapter {(served or 'unknown')[:12]}, not the one "
            f"published as v{version} ({published[:12]}): their log-probs belong to no version this "
            f"learner trained; check that every gateway on this store runs this release"
        )
    try:
        group_advantages([[r.reward for r in group.rollouts]], maxrl=maxrl)
    except (ValueError, TypeError) as exc:
        raise UnusableGroup(f"its rewards cannot be used: {exc}") from None
    other = [t for t in group.temperatures if abs(t - temperature) > TEMPERATURE_TOLERANCE]
    if other:
        raise UnusableGroup(
            f"its calls sampled at temperature {other[0]:g}, but the run's log-probs are taken at {temperature:g}"
        )
    for rollout in group.rollouts:
        for sample in rollout.samples:
            problem = _sample_problem(sample, vocab_size)
            if problem:
                raise UnusableGroup(f"rollout {rollout.rollout_id}, sample of calls {list(sample.call_ids)}: {problem}")


def _sample_problem(sample: Sample, vocab_size: int | None) -> str | None:
    length = len(sample.input_ids)
    if any(len(a) != length for a in (sample.loss_mask, sample.old_logprobs, sample.policy_versions)):
        return "its token, mask, logprob and version arrays differ in length"
    if sample.roles is not None and len(sample.roles) != length:
        return "its token and role arrays differ in length"
    if length and (sample.input_ids.min() < 0 or (vocab_size is not None and sample.input_ids.max() >= vocab_size)):
        return f"a token id outside the model's vocabulary of {vocab_size}"
    if not np.isin(sample.loss_mask, (0, 1)).all():
        return "its loss mask holds values other than 0 and 1"
    if np.isnan(sample.old_logprobs[sample.loss_mask == 1]).any():
        return "it trains on tokens the policy did not sample (a teacher's calls): use `harnessrl sft` for those"
    return None


# --- batches (pure) ----------------------------------------------------------------------------


def sample_version(sample: Sample) -> int | None:
    """The oldest policy version that sampled a token of the sample; None when nothing was sampled."""
    versions = sample.policy_versions[np.asarray(sample.loss_mask).astype(bool)]
    return int(versions.min()) if versions.size else None


def build_batch(
    groups: Sequence[ReadyGroup],
    learner_version: int,
    max_staleness: int,
    scale_by_std: bool = True,
    temperature: float = 1.0,
    advantages: GroupAdvantages | None = None,
    echo: bool = False,
) -> Batch:
    """Advantages per group (GRPO's, unless ``advantages`` are given: live sessions' estimator), then the
    samples worth training: scored, non-empty, fresh enough.

    ``echo`` (``[loss] echo_weight`` > 0): a fresh sample without an advantage (its group had no reward
    spread, or its rollout was not scored) is kept, advantage None, when it has a tool-result token
    (learner.echo): ECHO trains on it, GRPO does not (its GRPO term would be 0; it adds no GRPO token).

    Advantages use every scored rollout of a group, stale or not: a reward is a fact about the task
    whichever policy earned it, so the group's baseline stays the mean of all G rollouts.
    """
    if advantages is None:
        advantages = group_advantages([[r.reward for r in g.rollouts] for g in groups], scale_by_std=scale_by_std)
    kept: list[TrainSample] = []
    staleness: list[int] = []
    stale = unscored = empty = echo_only = 0
    for group, group_adv in zip(groups, advantages.advantages):
        for rollout, advantage in zip(group.rollouts, group_adv):
            for sample in rollout.samples:
                version = sample_version(sample)
                if version is None:
                    empty += 1
                    continue
                age = learner_version - version
                staleness.append(age)
                if advantage is None and not (echo and has_echo_targets(sample)):
                    unscored += 1
                elif age > max_staleness:
                    stale += 1
                else:
                    echo_only += advantage is None
                    kept.append(TrainSample(sample, advantage, age, group.group_id, rollout.rollout_id))
    return Batch(
        tuple(groups),
        tuple(kept),
        advantages,
        len(staleness),
        stale,
        unscored,
        empty,
        tuple(staleness),
        temperature,
        learner_version,
        echo_only,
    )
