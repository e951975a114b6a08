"""Advantages for sessions that come in no group (live traffic: a person's own agent sessions).

GRPO standardises rewards within a group of rollouts of one task; a person's sessions are one each, on
tasks nobody repeats. The estimator chosen here (the learner's ``[batch] advantage = "session"``):

- **a running baseline per key** (a user, or a repository): the advantage of a session is its reward
  minus an exponential moving average of the earlier rewards of its key, A = r - b_key, b_key <-
  decay * b_key + (1 - decay) * r. The baseline only uses *earlier* sessions, so a session never
  baselines itself (no bias), and keys never mix (one user's easy tasks do not lift another's).
- **leave-one-out across the batch** (RLOO) while a key has fewer than ``min_count`` sessions: the
  baseline of session i is the mean reward of the batch's other sessions, A_i = r_i - mean_{j != i} r_j.

Sessions sampled by much older policy versions need no weight here: the per-token importance ratio
(``[loss] is_correction``, truncated or masked) corrects each token for the version that sampled it, and
samples older than ``max_staleness`` are dropped as for groups (``learner.groups``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from learner.advantages import GroupAdvantages


def leave_one_out(rewards: Tensor) -> Tensor:
    """rewards float [N] -> advantages float [N]: r_i - mean of the others (0 for a batch of one).
    The advantages sum to 0 and do not move when every reward is shifted by the same amount."""
    n = rewards.numel()
    if n < 2:
        return torch.zeros_like(rewards)
    others = (rewards.sum() - rewards) / (n - 1)
    return rewards - others


@dataclass
class RunningBaselines:
    """Per key: the moving average of its sessions' rewards and how many it saw."""

    decay: float = 0.9  # weight of the past in each update
    min_count: int = 4  # sessions a key needs before its own baseline is used
    mean: dict[str, float] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)

    def update(self, key: str, reward: float) -> None:
        seen = self.count.get(key, 0)
        self.mean[key] = reward if seen == 0 else self.decay * self.mean[key] + (1.0 - self.decay) * reward
        self.count[key] = seen + 1


def session_advantages(rewards: Tensor, keys: Sequence[str], baselines: RunningBaselines) -> Tensor:
    """rewards float [N] of a batch of sessions in arrival order, keys [N] -> advantages float [N].

    A session of a key with at least ``min_count`` earlier sessions is baselined by its key's moving
    average; the others by leave-one-out across the batch. ``baselines`` is updated with the batch,
    after every advantage is taken (a batch's sessions do not baseline each other through it).
    """
    if rewards.numel() != len(keys):
        raise ValueError(f"{rewards.numel()} rewards for {len(keys)} keys")
    if not torch.isfinite(rewards).all():
        raise ValueError("a reward is not finite: that is a bug upstream, not a training signal")
    fallback = leave_one_out(rewards)
    own = [baselines.count.get(key, 0) >= baselines.min_count for key in keys]
    baseline = torch.tensor([baselines.mean.get(key, 0.0) for key in keys], dtype=rewards.dtype)
    advantages = torch.where(torch.tensor(own), rewards - baseline, fallback)
    for key, reward in zip(keys, rewards.tolist(), strict=True):
        baselines.update(key, reward)
    return advantages


def batch_session_advantages(
    rewards: Sequence[Sequence[float | None]], users: Sequence[Sequence[str]], baselines: RunningBaselines
) -> GroupAdvantages:
    """The learner's batch of live sessions (a group each, ``ReadyGroup.users`` their keys) through
    ``session_advantages``, in GroupAdvantages' shape: every scored session is kept (its advantage may be
    0: a lone new user's), unscored ones are dropped; no group is zero-std, a group without a score is
    empty."""
    scored = [(g, i, r, users[g][i]) for g, group in enumerate(rewards) for i, r in enumerate(group) if r is not None]
    found = session_advantages(
        torch.tensor([r for _, _, r, _ in scored], dtype=torch.float64), [u for *_, u in scored], baselines
    ).tolist()
    nested = [[None] * len(group) for group in rewards]
    for (g, i, _, _), advantage in zip(scored, found, strict=True):
        nested[g][i] = advantage
    with_score = sum(any(a is not None for a in group) for group in nested)
    mean = sum(r for _, _, r, _ in scored) / len(scored) if scored else None
    return GroupAdvantages(
        advantages=tuple(tuple(group) for group in nested),
        groups_kept=with_score,
        groups_zero_std=0,
        groups_empty=len(rewards) - with_score,
        rollouts_kept=len(scored),
        rollouts_unscored=sum(len(group) for group in rewards) - len(scored),
        reward_mean_all=mean,
        reward_mean_kept=mean,
        frac_reward_zero_std=0.0 if scored else None,
    )
