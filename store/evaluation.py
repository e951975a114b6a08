"""Per-policy evaluation counts: a run's pinned rollouts, per (policy, version, task), in one GROUP BY.

A rollout counts once it ended as ``finished`` or ``failed`` (cancelled ones were replaced). It
*passed* when it finished and its verifier's reward component (the total reward when it has none)
is at least ``PASS_REWARD``. A failed rollout (timeout, crash) counts as reward 0 and no pass. The
verifier's metrics are averaged per version over the finished rollouts that recorded them.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import Float, and_, case, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.passk import TaskCount, policy_label
from store.policies import DEFAULT_POLICY
from store.records import SCORED, RolloutStatus
from store.rewards import verifier_metrics
from store.tables import LearnerStep, Rollout, Task

PASS_REWARD = 1.0  # a verifier's "solved"
COUNTED = SCORED
VERIFIER_COMPONENT = "verifier"


def passed_expression():
    """1 for a rollout that passed, else 0 (SQL; on SQLite and PostgreSQL alike)."""
    verifier = cast(Rollout.rewards[VERIFIER_COMPONENT].as_string(), Float)
    score = func.coalesce(verifier, Rollout.reward)
    return case((and_(Rollout.status == RolloutStatus.FINISHED, score >= PASS_REWARD), 1), else_=0)


class Evaluations:
    """Pinned evaluation runs: pass counts and metric means per policy version."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def pinned_task_counts(self, run_id: int) -> list[TaskCount]:
        """Counts per (policy, pinned version, task) of the run's pinned rollouts, ordered by version, policy, task."""
        reward = case((Rollout.status == RolloutStatus.FINISHED, func.coalesce(Rollout.reward, 0.0)), else_=0.0)
        query = (
            select(
                Rollout.pinned_version,
                Rollout.policy,
                Task.name,
                func.count(),
                func.sum(passed_expression()),
                func.count().filter(Rollout.status == RolloutStatus.FAILED),
                func.sum(reward),
                func.sum(reward * reward),
            )
            .join(Task, Task.id == Rollout.task_id)
            .where(Rollout.run_id == run_id, Rollout.pinned_version.is_not(None), Rollout.status.in_(COUNTED))
            .group_by(Rollout.pinned_version, Rollout.policy, Task.name)
            .order_by(Rollout.pinned_version, Rollout.policy, Task.name)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        counts = [
            TaskCount(version, task, n, int(passed or 0), failed, float(total or 0.0), float(squares or 0.0), policy)
            for version, policy, task, n, passed, failed, total, squares in rows
        ]
        return merged_base(counts)

    async def policy_task_counts(self, policy: str) -> list[TaskCount]:
        """Per (version, task): one policy's pinned rollouts over every run (its held-out evaluations)."""
        query = (
            select(
                Rollout.pinned_version,
                Task.name,
                func.count(),
                func.sum(passed_expression()),
                func.count().filter(Rollout.status == RolloutStatus.FAILED),
            )  # fmt: skip
            .join(Task, Task.id == Rollout.task_id)
            .where(Rollout.policy == policy, Rollout.pinned_version.is_not(None), Rollout.status.in_(COUNTED))
            .group_by(Rollout.pinned_version, Task.name)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [
            TaskCount(v, task, n, int(passed or 0), failed, 0.0, 0.0, policy) for v, task, n, passed, failed in rows
        ]

    async def pinned_metric_means(self, run_id: int) -> dict[str, dict[str, float]]:
        """Per pinned policy version (its label: ``base``, ``pi-v3``), the mean of each verifier metric
        (reward.json's numbers beside the reward) over the finished rollouts that recorded it. Averaged
        here, not in SQL: the metrics are JSON per rollout."""
        query = select(Rollout.pinned_version, Rollout.policy, Rollout.reward_details).where(
            Rollout.run_id == run_id, Rollout.pinned_version.is_not(None), Rollout.status == RolloutStatus.FINISHED
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        sums: dict[str, dict[str, list[float]]] = {}
        for version, policy, details in rows:
            for name, value in verifier_metrics(details).items():
                sums.setdefault(policy_label(version, policy), {}).setdefault(name, []).append(value)
        return {
            version: {name: sum(values) / len(values) for name, values in sorted(metrics.items())}
            for version, metrics in sums.items()
        }

    async def record_eval_metrics(self, run_id: int, version: int, metrics: dict) -> int | None:
        """Merge a version's evaluation numbers (``eval_*`` keys) into the learner's metrics of the first
        step the learner took at that version or later; that step, or None when there is none yet."""
        at_version = LearnerStep.metrics["version"].as_integer() >= version
        query = (
            select(LearnerStep)
            .where(LearnerStep.run_id == run_id, at_version)
            .order_by(LearnerStep.step)
            .limit(1)
            .with_for_update()
        )
        async with self.sessions.begin() as session:
            row = (await session.scalars(query)).first()
            if row is None:
                return None
            row.metrics = {**(row.metrics or {}), **metrics}  # a new dict: the JSON column sees the change
            return row.step


def merged_base(counts: list[TaskCount]) -> list[TaskCount]:
    """The base model's cells of every policy's ``base`` pins as one policy's (the same model served them)."""
    base: dict[str, TaskCount] = {}
    rest = []
    for cell in counts:
        if cell.version != 0:
            rest.append(cell)
            continue
        seen = base.get(cell.task)
        base[cell.task] = (
            dataclasses.replace(cell, policy=DEFAULT_POLICY)
            if seen is None
            else dataclasses.replace(
                seen,
                n=seen.n + cell.n,
                passed=seen.passed + cell.passed,
                failed=seen.failed + cell.failed,
                reward_sum=seen.reward_sum + cell.reward_sum,
                reward_sum_squares=seen.reward_sum_squares + cell.reward_sum_squares,
            )
        )
    return [*sorted(base.values(), key=lambda c: c.task), *rest]
