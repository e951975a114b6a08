"""GRPO advantages: each rollout's reward standardised within its group.

Conventions (fixed here so every caller and metric agrees):
- std is the *population* std (ddof = 0) over the group's scored rollouts, so the kept advantages of
  a group have mean 0 and root-mean-square exactly 1 whatever the group size;
- a rollout whose reward is None was not scored: it gets no advantage (None) and is not trained on,
  and it does not enter its group's mean or std;
- a group whose std is at most ``eps`` (all rewards equal, or a single scored rollout) carries no
  learning signal: every rollout of it is dropped and the group is counted as zero-std;
- a group with no scored rollout at all is counted as empty (neither kept nor zero-std).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupAdvantages:
    # advantages[g][i]: advantage of rollout i of group g (unitless); None = not trained on
    # (unscored, or its group was dropped). Same nesting as the rewards given.
    advantages: tuple[tuple[float | None, ...], ...]
    groups_kept: int  # groups with std > eps
    groups_zero_std: int  # dropped: all scored rewards equal, or a single scored rollout
    groups_empty: int  # dropped: no scored rollout
    rollouts_kept: int  # rollouts with an advantage
    rollouts_unscored: int  # reward None
    reward_mean_all: float | None  # mean reward over every scored rollout of every group; None if none
    reward_mean_kept: float | None  # mean reward over the scored rollouts of kept groups; None if none
    frac_reward_zero_std: float | None  # groups_zero_std / groups with a scored rollout; None if none

    @property
    def groups_dropped(self) -> int:
        return self.groups_zero_std + self.groups_empty


def group_advantages(
    rewards: Sequence[Sequence[float | None]], eps: float = 1e-6, scale_by_std: bool = True
) -> GroupAdvantages:
    """Advantages for several groups at once.

    rewards: one sequence per group, one reward (float, or None when unscored) per rollout.
    eps: a group whose population std is <= eps is dropped as zero-std (rewards equal up to rounding).
    scale_by_std: False gives the mean-centred advantage r - mean without the division ("Dr. GRPO");
        zero-std groups are dropped either way, since all their advantages are zero.
    Raises ValueError on a NaN or infinite reward: that is a bug upstream, not a training signal.
    """
    per_group: list[tuple[float | None, ...]] = []
    kept = zero_std = empty = rollouts_kept = unscored = 0
    scored_all: list[float] = []
    scored_kept: list[float] = []
    for group in rewards:
        scored = [_checked(r) for r in group if r is not None]
        unscored += len(group) - len(scored)
        scored_all.extend(scored)
        if not scored:
            empty += 1
            per_group.append((None,) * len(group))
            continue
        mean, std = _mean_std(scored)
        if std <= eps:
            zero_std += 1
            per_group.append((None,) * len(group))
            continue
        kept += 1
        rollouts_kept += len(scored)
        scored_kept.extend(scored)
        scale = std if scale_by_std else 1.0
        per_group.append(tuple(None if r is None else (r - mean) / scale for r in group))
    with_score = kept + zero_std
    return GroupAdvantages(
        advantages=tuple(per_group),
        groups_kept=kept,
        groups_zero_std=zero_std,
        groups_empty=empty,
        rollouts_kept=rollouts_kept,
        rollouts_unscored=unscored,
        reward_mean_all=_mean_or_none(scored_all),
        reward_mean_kept=_mean_or_none(scored_kept),
        frac_reward_zero_std=zero_std / with_score if with_score else None,
    )


def _checked(reward: float) -> float:
    value = float(reward)
    if not math.isfinite(value):
        raise ValueError(f"reward {reward!r} is not finite")
    return value


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std (ddof = 0). Equal rewards can give a std of ~1e-17 from rounding
    (three rewards of 0.1 average to 0.10000000000000002): the caller's eps absorbs it."""
    mean = math.fsum(values) / len(values)
    variance = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return mean, math.sqrt(variance)


def _mean_or_none(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None
