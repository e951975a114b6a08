"""Evaluation statistics: pass@k (the unbiased estimator) and a mean with its 95% interval.

pass@k of one task with n samples of which c passed (Chen et al. 2021, "Evaluating Large Language
Models Trained on Code"): the chance that at least one of k samples drawn without replacement from
the n passes, ``1 - C(n - c, k) / C(n, k)``, computed as a product so large n stay exact in floats.
A policy's pass@k is the mean over its tasks. Pure functions: no I/O, no store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from store.policies import DEFAULT_POLICY, adapter_name

Z_95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: n samples, c of them passed; needs 0 <= c <= n and 1 <= k <= n."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a pass
        return 1.0
    failing_draws = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        failing_draws *= 1.0 - k / i
    return 1.0 - failing_draws


def mean_pass_at_k(per_task: Sequence[tuple[int, int]], k: int) -> float | None:
    """pass@k averaged over tasks given as (n, c); tasks with fewer than k samples are left out
    (None when none has k)."""
    values = [pass_at_k(n, c, k) for n, c in per_task if n >= k]
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class Interval:
    mean: float | None  # None without values
    low: float | None  # mean -/+ 1.96 standard errors (normal approximation); equal to mean for n = 1
    high: float | None
    n: int


def mean_interval(count: int, total: float, total_squares: float) -> Interval:
    """The mean of ``count`` values given their sum and sum of squares, with a 95% interval."""
    if count == 0:
        return Interval(None, None, None, 0)
    mean = total / count
    if count == 1:
        return Interval(mean, mean, mean, 1)
    variance = max(0.0, (total_squares - count * mean * mean) / (count - 1))  # sample variance
    half = Z_95 * math.sqrt(variance / count)
    return Interval(mean, mean - half, mean + half, count)


@dataclass(frozen=True)
class TaskCount:
    """One (policy, task) cell: ended rollouts, passes, failures and reward sums (failures as 0)."""

    version: int  # the policy version (0 = base)
    task: str
    n: int
    passed: int
    failed: int
    reward_sum: float
    reward_sum_squares: float
    policy: str = DEFAULT_POLICY


@dataclass(frozen=True)
class PolicyResult:
    version: int
    tasks: int
    n: int  # rollouts counted
    passed: int
    failures: int
    k: int  # the k of pass_at_k
    pass_at_1: float | None  # mean over tasks of passed / n
    pass_at_k: float | None  # mean over the tasks with at least k rollouts
    reward: Interval  # mean reward per rollout with its 95% interval
    policy: str = DEFAULT_POLICY

    @property
    def label(self) -> str:
        return policy_label(self.version, self.policy)


def policy_results(cells: Sequence[TaskCount], k: int | None = None) -> list[PolicyResult]:
    """Each policy version's numbers from its (task) cells: the base model first, then by policy and
    version. ``k`` None: the policy's smallest n
    over its tasks (the k every task has)."""
    by_version: dict[tuple[int, str], list[TaskCount]] = {}
    for cell in cells:  # the base model is one policy, whichever pinned it
        by_version.setdefault((cell.version, cell.policy if cell.version else DEFAULT_POLICY), []).append(cell)
    results = []
    for (version, policy), mine in sorted(
        by_version.items(), key=lambda item: (item[0][0] != 0, item[0][1], item[0][0])
    ):
        per_task = [(c.n, c.passed) for c in mine]
        chosen = k if k is not None else min(n for n, _ in per_task)
        n = sum(c.n for c in mine)
        results.append(
            PolicyResult(
                version=version,
                tasks=len(mine),
                n=n,
                passed=sum(c.passed for c in mine),
                failures=sum(c.failed for c in mine),
                k=chosen,
                pass_at_1=mean_pass_at_k(per_task, 1),
                pass_at_k=mean_pass_at_k(per_task, chosen),
                reward=mean_interval(n, sum(c.reward_sum for c in mine), sum(c.reward_sum_squares for c in mine)),
                policy=policy,
            )
        )
    return results


def policy_label(version: int, policy: str = DEFAULT_POLICY) -> str:
    """How results name a policy version: ``base`` (any policy's version 0) or ``<policy>-v<N>``."""
    return "base" if version == 0 else adapter_name(policy, version)
