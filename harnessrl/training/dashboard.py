"""The quickstart's terminal table and its reward curve: rewards per round and per policy version,
staleness and throughput, from the runner's results and the learner's step metrics. Each round names
its phase (a warm start's "warm-up: ..." rounds, then "grpo"); a warm start's SFT is one row between
them (its steps, last loss and the version it was published as)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Group
from rich.table import Table

from learner.sft import SftStep
from rollouts.run_plan import RolloutResult
from store.records import RolloutStatus
from store.reports import VersionReward
from store.store import Store

TABLE_ROUNDS = 12  # rows of rounds the terminal table shows: the first and the latest


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
    evals: dict[int, dict[str, dict]] = field(default_factory=dict)  # version -> label -> eval_* metrics
    versions: list[VersionReward] = field(default_factory=list)  # the run's rollouts' reward per policy version

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

    def add_eval(self, label: str, metrics: dict) -> None:
        """A held-out evaluation's metrics (harnessrl.evaluation.periodic), shown under ``label``."""
        self.evals.setdefault(metrics["eval_version"], {})[label] = metrics

    def view(self) -> Group | Table:
        """The terminal display: the rounds' table and, once there is one, the held-out evaluations'."""
        return Group(self.render(), self.eval_table()) if self.evals else self.render()

    def eval_table(self) -> Table:
        labels = list(dict.fromkeys(label for by_label in self.evals.values() for label in by_label))
        table = Table(title="held-out pass@1 (pass@k) per policy version")
        table.add_column("policy", justify="right")
        for label in labels:
            table.add_column(label, justify="right")
        for version, by_label in sorted(self.evals.items()):
            cells = [_eval_cell(by_label.get(label)) for label in labels]
            table.add_row(self.version_name(version), *cells)
        return table

    def version_name(self, version: int) -> str:
        """v0 is the base model; a warm start's published SFT version says so."""
        if version == 0:
            return "base"
        return f"v{version} (sft)" if self.sft and self.sft.get("version") == version else f"v{version}"

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


def _eval_cell(metrics: dict | None) -> str:
    if metrics is None:
        return ""
    k = metrics["eval_k"]
    return f"{metrics['eval_pass_at_1'] or 0:.3f} (pass@{k} {metrics['eval_pass_at_k'] or 0:.3f})"


def _fmt(value) -> str:
    return "" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _plot_versions(axes, dashboard: Dashboard) -> None:
    """The rollouts' mean reward per policy version that served them: a round's progress, hot swap by hot
    swap, which one point per round hides. Each point says how many rollouts it averages."""
    points = dashboard.versions
    axes.plot([p.version for p in points], [p.reward_mean for p in points], marker="o", color="C0")
    for p in points:
        axes.annotate(
            str(p.rollouts), (p.version, p.reward_mean), fontsize=7, xytext=(0, 5), textcoords="offset points"
        )
    if points:
        axes.set_xticks([p.version for p in points], [dashboard.version_name(p.version) for p in points], fontsize=8)
    axes.set(xlabel="policy version (rollouts)", ylabel="mean reward", title="reward per version", ylim=(-0.02, 1.1))


def _plot_evals(axes, dashboard: Dashboard) -> None:
    """Held-out pass@1 per evaluated version, one line per task set (held-out split, unseen kind)."""
    versions = sorted(dashboard.evals)
    labels = dict.fromkeys(label for by_label in dashboard.evals.values() for label in by_label)
    for n, label in enumerate(labels):
        points = [(v, dashboard.evals[v][label]["eval_pass_at_1"]) for v in versions if label in dashboard.evals[v]]
        axes.plot([p[0] for p in points], [p[1] or 0.0 for p in points], marker="o", color=f"C{n + 2}", label=label)
    axes.set_xticks(versions, [dashboard.version_name(v) for v in versions], fontsize=8)
    axes.set(xlabel="policy version", ylabel="pass@1", title="held-out pass@1", ylim=(-0.02, 1.02))
    axes.legend(fontsize=8, loc="best")


async def version_rewards(store: Store, run: str) -> list[VersionReward]:
    """The run's scored rollouts' mean reward per policy version that served them."""
    run_id = await store.listings.run_id(run)
    return [] if run_id is None else await store.reports.reward_by_version(run_id)


async def capture_line(store: Store, runs: list[str]) -> str:
    """How many later turns of ``runs``' rollouts extended the previous call's prompt + output ids exactly."""
    later = extending = 0
    for run in runs:
        run_id = await store.listings.run_id(run)
        if run_id is not None:
            summary = await store.summary.run_summary(run_id)
            later, extending = later + summary["later_turns"], extending + summary["extending_turns"]
    share = f" ({extending / later:.1%})" if later else ""
    return (
        f"capture: {extending} of {later} later turns extended the previous call's prompt + output ids "
        f"exactly{share}; the others are forks (the viewer and GET /api/calls show each fork_of and its drift)"
    )


async def step_rows(store: Store, run: str) -> list[dict]:
    """The learner's per-step metrics of a run, each with its step."""
    run_id = await store.listings.run_id(run)
    return [] if run_id is None else [{"step": step, **m} for step, m in await store.training.learner_steps(run_id)]


def save_reward_curve(dashboard: Dashboard, path: Path) -> Path:
    """Mean reward per round of rollouts, per policy version, the learner's loss per step and, when
    evaluated, held-out pass@1 per version."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = sorted(dashboard.rewards_by_round)
    count = 3 + bool(dashboard.evals)
    figure, panels = plt.subplots(1, count, figsize=(5 * count, 4))
    rewards, by_version, losses = panels[:3]
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
    _plot_versions(by_version, dashboard)
    trained = [s for s in dashboard.steps if s.get("loss") is not None]
    losses.plot([s["step"] for s in trained], [s["loss"] for s in trained], color="grey", marker=".")
    losses.set(xlabel="learner step", ylabel="loss", title="learner loss (steps that trained)")
    if dashboard.evals:
        _plot_evals(panels[3], dashboard)
    figure.suptitle(f"harnessrl quickstart: {dashboard.run}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
