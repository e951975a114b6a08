"""The quickstart's live table and its reward curve: rewards per round and per policy version,
staleness and throughput, from the runner's results and the learner's step metrics."""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from harnesses.runner import RolloutResult


@dataclass
class Dashboard:
    run: str
    started: float = field(default_factory=time.monotonic)
    rewards_by_round: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed: int = 0
    policy: dict = field(default_factory=dict)  # GET /admin/policy
    steps: list[dict] = field(default_factory=list)  # learner metrics per step

    def add_result(self, round_: int, result: RolloutResult) -> None:
        if result.reward is not None:
            self.rewards_by_round[round_].append(result.reward)
        self.failed += result.status == "failed"

    def render(self) -> Table:
        table = Table(title=f"harnessrl quickstart: run {self.run!r}  ({time.monotonic() - self.started:.0f} s)")
        for column in ("round", "rollouts", "mean reward", "policy", "learner step", "loss", "staleness",
                       "tokens/s"):
            table.add_column(column, justify="right")
        last = self.steps[-1] if self.steps else {}
        trained = [s for s in self.steps if s.get("loss") is not None]
        last_loss = trained[-1]["loss"] if trained else None
        rollouts = sum(len(r) for r in self.rewards_by_round.values())
        elapsed = max(1e-9, time.monotonic() - self.started)
        for round_, rewards in sorted(self.rewards_by_round.items())[-8:]:
            table.add_row(str(round_), str(len(rewards)), f"{statistics.fmean(rewards):.3f}", "", "", "", "", "")
        table.add_row("now", f"{rollouts} (+{self.failed} failed)", "",
                      f"v{self.policy.get('current_version', 0)}", str(last.get("step", 0)),
                      _fmt(last_loss), _fmt(last.get("staleness_mean")),
                      _fmt(sum(s.get("tokens", 0) for s in self.steps) / elapsed))
        return table


def _fmt(value) -> str:
    return "" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


async def learner_steps(engine: AsyncEngine, run: str) -> list[dict]:
    """The learner's per-step metrics of a run."""
    query = text("SELECT s.step, s.metrics FROM learner_steps s JOIN runs r ON r.id = s.run_id "
                 "WHERE r.name = :run ORDER BY s.step")
    try:
        async with engine.connect() as connection:
            rows = (await connection.execute(query, {"run": run})).all()
    except DBAPIError:  # before the learner's migration ran there is nothing to show
        return []
    return [{"step": step, **(json.loads(m) if isinstance(m, str) else m)} for step, m in rows]


def save_reward_curve(dashboard: Dashboard, path: Path) -> Path:
    """Mean reward per round of rollouts (left) and the learner's loss per step (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = sorted(dashboard.rewards_by_round)
    figure, (rewards, losses) = plt.subplots(1, 2, figsize=(10, 4))
    rewards.plot(rounds, [statistics.fmean(dashboard.rewards_by_round[r]) for r in rounds], marker="o")
    rewards.set(xlabel="round of rollouts", ylabel="mean reward", title="reward", ylim=(-0.02, 1.02))
    trained = [s for s in dashboard.steps if s.get("loss") is not None]
    losses.plot([s["step"] for s in trained], [s["loss"] for s in trained], color="grey", marker=".")
    losses.set(xlabel="learner step", ylabel="loss", title="learner loss (steps that trained)")
    figure.suptitle(f"harnessrl quickstart: {dashboard.run}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
