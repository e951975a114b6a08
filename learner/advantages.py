"""GRPO advantages: each rollout's reward standardised within its group; or MaxRL's, divided by its mean.

Conventions (fixed here so every caller and metric agrees):
- std is the *population* std (ddof = 0) over the group's scored rollouts, so the kept advantages of
  a group have mean 0 and root-mean-square exactly 1 whatever the group size;
- a rollout whose reward is None was not scored: it gets no advantage (None) and is not trained on,
  and it does not enter its group's mean or std;
- a group whose std is at most ``eps`` (all rewards equal, or a single scored rollout) carries no
  learning signal: every rollout of it is dropped and the group is counted as zero-std;
- a group with no scored rollout at all is counted as empty (neither kept nor zero-std).

MaxRL (``[batch] advantage = "maxrl"``; ``maxrl_advantages``): (r - mean) / mean instead of (r - mean) / std,
the group's mean reward being its estimated success rate p. Source: Tajwar, Zeng, Zhou, Song, Arora, Jiang,
Schneider, Salakhutdinov, Feng, Zanette, "Maximum Likelihood Reinforcement Learning" (arXiv 2602.02710, 2026;
https://zanette-labs.github.io/MaxRL), whose released verl estimator ``compute_maxrl_outcome_advantage`` is
(reward - group mean) / (group mean + epsilon), without whitening. Why: log p = -sum_k (1 - p)^k / k, so
grad log p = sum_k grad pass@k / k. The paper's estimator averages the score function over the K successes of
N rollouts, (1/K) sum_{r_i = 1} grad log pi(z_i) (zero when K = 0), unbiased for the gradient of the order-N
truncation -sum_{k<=N} (1 - p)^k / k of log p; less the control variate (1/N) sum_i grad log pi(z_i), that is
(1/N) sum_i (r_i / mean - 1) grad log pi(z_i): advantage (r_i - mean) / mean, the 1/N being the loss's mean over
samples. In expectation it weighs grad p by ~1/p, where GRPO's (r - mean) / std weighs it by 1/sqrt(p (1 - p))
and r - mean by 1 (pass@1). A success in a group of N with K successes gets (N - K) / K, a failure -1: hard
prompts (small p) weigh more. Conventions here:
- rewards must lie in [0, 1] (pass/fail, or a fraction of success): the mean must be a success rate. A reward
  outside is refused (ValueError naming the key; the intake quarantines such a group), not divided by |mean|:
  with negative rewards the mean can be ~0 while the rewards spread, and the division has no likelihood to follow;
- a group whose mean is at most ``eps`` (no success) carries no signal, exactly as a zero-std group, and is
  counted as one (with rewards in [0, 1] a mean of 0 means every reward is 0, std 0 too);
- ``scale_by_std`` does not apply (the config refuses maxrl with scale_by_std = false).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAXRL_KEY = 'batch.advantage = "maxrl"'  # named in every refusal of a reward MaxRL cannot use


@dataclass(frozen=True)
class GroupAdvantages:
    # advantages[g][i]: advantage of rollout i of group g (unitless); None = not trained on
    # (unscored, or its group was dropped). Same nesting as the rewards given.
    advantages: tuple[tuple[float | None, ...], ...]
    groups_kept: int  # groups with std > eps (and, under MaxRL, mean > eps)
    groups_zero_std: int  # dropped: all scored rewards equal, or a single scored rollout (MaxRL: or mean <= eps)
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
    rewards: Sequence[Sequence[float | None]], eps: float = 1e-6, scale_by_std: bool = True, maxrl: bool = False
) -> GroupAdvantages:
    """Advantages for several groups at once.

    rewards: one sequence per group, one reward (float, or None when unscored) per rollout.
    eps: a group whose population std is <= eps is dropped as zero-std (rewards equal up to rounding).
    scale_by_std: False gives the mean-centred advantage r - mean without the division ("Dr. GRPO");
        zero-std groups are dropped either way, since all their advantages are zero.
    maxrl: True gives MaxRL's (r - mean) / mean (``maxrl_advantages``; ``scale_by_std`` is not used): a group whose
        mean is <= eps is dropped and counted as zero-std, as one whose std is.
    Raises ValueError on a NaN or infinite reward: that is a bug upstream, not a training signal; under ``maxrl``
    also on a reward outside [0, 1], naming the key.
    """
    per_group: list[tuple[float | None, ...]] = []
    kept = zero_std = empty = rollouts_kept = unscored = 0
    scored_all: list[float] = []
    scored_kept: list[float] = []
    for group in rewards:
        scored = [_checked(r) for r in group if r is not None]
        if maxrl:
            _check_success_rates(scored)
        unscored += len(group) - len(scored)
        scored_all.extend(scored)
        if not scored:
            empty += 1
            per_group.append((None,) * len(group))
            continue
        mean, std = _mean_std(scored)
        if std <= eps or (maxrl and mean <= eps):
            zero_std += 1
            per_group.append((None,) * len(group))
            continue
        kept += 1
        rollouts_kept += len(scored)
        scored_kept.extend(scored)
        if maxrl:
            values = iter(maxrl_advantages(np.array(scored), eps).tolist())
            per_group.append(tuple(None if r is None else next(values) for r in group))
        else:
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


def maxrl_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """MaxRL's advantages (module docstring): (r - mean) / mean within each group.

    rewards: float [..., N], the last axis one group's N scored rewards, each in [0, 1].
    Returns float64 [..., N]; a group whose mean is <= eps or whose population std is <= eps (no success, or
    all rewards equal) gets zeros: it carries no signal (``group_advantages`` drops such a group instead).
    Raises ValueError, naming the key, on a reward outside [0, 1] or not finite.
    """
    values = np.asarray(rewards, dtype=np.float64)
    _check_success_rates(values.ravel().tolist())
    mean = values.mean(axis=-1, keepdims=True)
    signal = (mean > eps) & (values.std(axis=-1, keepdims=True) > eps)
    return np.where(signal, (values - mean) / np.where(signal, mean, 1.0), 0.0)


def _check_success_rates(rewards: list[float]) -> None:
    for reward in rewards:
        if not (0.0 <= reward <= 1.0):  # NaN fails this too
            raise ValueError(f"reward {reward!r} is outside [0, 1]: {MAXRL_KEY} needs success rates (pass/fail)")


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
