"""A terminal view of a run: rollouts done, failed and running, and the mean reward so far."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rollouts.run_plan import RolloutResult
from store.records import RolloutStatus


class RunProgress:
    def __init__(self, total: int, console: Console | None = None):
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.bar = self.progress.add_task("rollouts", total=total, stats="")
        self.running = self.failed = 0
        self.rewards: list[float] = []

    def started(self, task: str, index: int) -> None:
        self.running += 1
        self._refresh()

    def finished(self, result: RolloutResult) -> None:
        self.running -= 1
        self.failed += result.status == RolloutStatus.FAILED
        if result.reward is not None:
            self.rewards.append(result.reward)
        self.progress.advance(self.bar)
        self._refresh()

    def _refresh(self) -> None:
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
        self.progress.update(self.bar, stats=f"running {self.running}  failed {self.failed}  mean reward {mean:.3f}")

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()
