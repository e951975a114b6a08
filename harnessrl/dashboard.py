"""The quickstart's live table and its reward curve: rewards per round and per policy version,
staleness and throughput, from the runner's results and the learner's step metrics. Each round names
its phase (a warm start's "warm-up: ..." rounds, then "grpo"); a warm start's SFT is one row between
them (its steps, last loss and the version it was published as)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from gateway.store.records import RolloutStatus
from gateway.store.store import Store
from gateway.store.training import learner_steps
from harnesses.runner import RolloutResult
from learner.sft import SftStep

TABLE_ROUNDS = 12  # rows of rounds the live table shows: the first and the latest


@dataclass
class Dashboard:
    run: str
    started: float = field(default_factory=time.monotonic)
    rewards_by_round: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed: int = 0
    policy: dict = field(default_factory=dict)  # GET /admin/policy
    steps: list[dict] = field(default_factory=list)  # learner metrics per step
    phases: dict[int, str] = field(default_factory=dict)  # round -> its phase ("grpo" when not named)
    sft: dict | None = None  # a warm start's SFT: after_round, losses, status, version, rollouts

    def next_round(self, phase: str) -> int:
        """The number the next round is shown (and plotted) as, in ``phase``."""
        round_ = max([*self.phases, *self.rewards_by_round], default=-1) + 1
        self.phases[round_] = phase
        return round_

    def sft_started(self) -> None:
        self.sft = {
            "after_round": max(self.phases, default=-1),
            "losses": [],
            "status": "training",
            "version": None,
            "rollouts": 0,
        }

    def add_sft_step(self, step: SftStep) -> None:  # called from the SFT thread: one append
        self.sft["losses"].append(step.loss)

    def sft_done(self, version: int | None, rollouts: int) -> None:
        self.sft.update(status="published" if version is not None else "skipped", version=version, rollouts=rollouts)

    def add_result(self, round_: int, result: RolloutResult) -> None:
        if result.reward is not None:
            self.rewards_by_round[round_].append(result.reward)
        self.failed += result.status == RolloutStatus.FAILED

    def render(self) -> Table:
        table = Table(title=f"harnessrl quickstart: run {self.run!r}  ({time.monotonic() - self.started:.0f} s)")
        for column in (
            "round",
            "phase",
            "rollouts",
            "mean reward",
            "policy",
            "learner step",
            "loss",
            "staleness",
            "tokens/s",
        ):
            table.add_column(column, justify="right")
        last = self.steps[-1] if self.steps else {}
        trained = [s for s in self.steps if s.get("loss") is not None]
        last_loss = trained[-1]["loss"] if trained else None
        rollouts = sum(len(r) for r in self.rewards_by_round.values())
        elapsed = max(1e-9, time.monotonic() - self.started)
        rounds = sorted(self.rewards_by_round.items())
        if len(rounds) > TABLE_ROUNDS:  # the first round (the base model's) stays: what the curve starts from
            rounds = [rounds[0], *rounds[len(rounds) - TABLE_ROUNDS + 1 :]]
        sft_shown = self.sft is None
        for index, (round_, rewards) in enumerate(rounds):
            if not sft_shown and round_ > self.sft["after_round"]:
                table.add_row(*self._sft_row())
                sft_shown = True
            if index == 1 and round_ != rounds[0][0] + 1:
                table.add_row("…", "", "", "", "", "", "", "", "")
            table.add_row(
                str(round_),
                self.phases.get(round_, "grpo"),
                str(len(rewards)),
                f"{statistics.fmean(rewards):.3f}",
                "",
                "",
                "",
                "",
                "",
            )
        if not sft_shown:
            table.add_row(*self._sft_row())
        table.add_row(
            "now",
            "",
            f"{rollouts} (+{self.failed} failed)",
            "",
            f"v{self.policy.get('current_version', 0)}",
            str(last.get("step", 0)),
            _fmt(last_loss),
            _fmt(last.get("staleness_mean")),
            _fmt(sum(s.get("tokens", 0) for s in self.steps) / elapsed),
        )
        return table

    def _sft_row(self) -> tuple[str, ...]:
        sft = self.sft
        losses = sft["losses"]
        what = f"sft: {sft['status']}" + (f" ({sft['rollouts']} successes)" if sft["rollouts"] else "")
        version = "" if sft["version"] is None else f"v{sft['version']}"
        return ("sft", what, "", "", version, f"{len(losses)} steps", _fmt(losses[-1]) if losses else "", "", "")


def _fmt(value) -> str:
    return "" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


async def step_rows(store: Store, run: str) -> list[dict]:
    """The learner's per-step metrics of a run, each with its step."""
    run_id = await store.run_id(run)
    return [] if run_id is None else [{"step": step, **m} for step, m in await learner_steps(store, run_id)]


def save_reward_curve(dashboard: Dashboard, path: Path) -> Path:
    """Mean reward per round of rollouts (left) and the learner's loss per step (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = sorted(dashboard.rewards_by_round)
    figure, (rewards, losses) = plt.subplots(1, 2, figsize=(10, 4))
    rewards.plot(rounds, [statistics.fmean(dashboard.rewards_by_round[r]) for r in rounds], marker="o", color="C0")
    warm = [r for r in rounds if dashboard.phases.get(r, "grpo") != "grpo"]
    if warm:  # the warm-up rounds in their own colour, SFT as a line between them and GRPO
        rewards.plot(
            warm,
            [statistics.fmean(dashboard.rewards_by_round[r]) for r in warm],
            marker="o",
            linestyle="",
            color="C1",
            label=dashboard.phases[warm[0]],
        )
    if dashboard.sft is not None:
        version = dashboard.sft["version"]
        rewards.axvline(
            dashboard.sft["after_round"] + 0.5,
            color="grey",
            linestyle="--",
            label=f"sft -> v{version}" if version is not None else "sft skipped",
        )
        rewards.legend(fontsize=8, loc="best")
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
