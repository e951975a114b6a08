"""The run summary's per-policy results: pass@1, pass@k, mean reward with its interval, failures, per task."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from store.passk import mean_interval, pass_at_k
from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.pinning import ended_rollout as ended
from tests.pinning import publish


@pytest.fixture
async def gw(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    async for harness in start_gateway(gateway_settings(sqlite_db, fake_engine_server.url), fake_engine):
        yield harness


async def test_the_summary_reports_each_policys_pass_rates_rewards_and_failures(gw):
    await publish(gw, 1)
    # base on task a: 1 pass of 2; on task b: 0 of 2, one of them failed (counts as 0)
    await ended(gw, "base", "a", "finished", {"verifier": 1.0}, "base")
    await ended(gw, "base", "a", "finished", {"verifier": 0.0}, "base")
    await ended(gw, "base", "b", "finished", {"verifier": 0.0, "api": 1.0}, "base")  # total 1, verifier says no
    await ended(gw, "base", "b", "failed", {}, "base")
    # policy-v1: a 2 of 2 (one with a judge bonus), b 1 of 2
    await ended(gw, "policy-v1", "a", "finished", {"verifier": 1.0}, "v1")
    await ended(gw, "policy-v1", "a", "finished", {"verifier": 1.0, "judge": 0.5}, "v1")
    await ended(gw, "policy-v1", "b", "finished", {"verifier": 1.0}, "v1")
    await ended(gw, "policy-v1", "b", "finished", {"verifier": 0.0}, "v1")
    await ended(gw, "policy-v1", "b", "cancelled", {}, "v1-extra")  # replaced: not counted
    await ended(gw, None, "a", "finished", {"verifier": 1.0}, "unpinned")  # not an evaluation rollout

    summary = (await gw.http.get("/api/runs/eval/summary")).json()
    base, v1 = summary["policies"]
    assert (base["policy"], base["rollouts"], base["passed"], base["failures"], base["tasks"], base["k"]) == (
        "base",
        4,
        1,
        1,
        2,
        2,
    )
    assert base["pass_at_1"] == pytest.approx((1 / 2 + 0) / 2)
    assert base["pass_at_k"] == pytest.approx((pass_at_k(2, 1, 2) + 0) / 2)
    interval = mean_interval(4, 1.0 + 0.0 + 1.0 + 0.0, 1.0 + 1.0)
    assert (base["reward_mean"], base["reward_low"], base["reward_high"]) == pytest.approx(
        (interval.mean, interval.low, interval.high)
    )
    assert (v1["policy"], v1["rollouts"], v1["passed"], v1["failures"]) == ("policy-v1", 4, 3, 0)
    assert v1["pass_at_1"] == pytest.approx((1.0 + 0.5) / 2) and v1["pass_at_k"] == pytest.approx(1.0)
    assert v1["reward_mean"] == pytest.approx((1 + 1.5 + 1 + 0) / 4)
    assert summary["policy_tasks"] == [
        {"task": "a", "policies": {"base": {"rollouts": 2, "passed": 1}, "policy-v1": {"rollouts": 2, "passed": 2}}},
        {"task": "b", "policies": {"base": {"rollouts": 2, "passed": 0}, "policy-v1": {"rollouts": 2, "passed": 1}}},
    ]


async def test_a_run_without_pinned_rollouts_has_no_policy_results(gw):
    await ended(gw, None, "a", "finished", {"verifier": 1.0}, "g")
    summary = (await gw.http.get("/api/runs/eval/summary")).json()
    assert summary["policies"] == [] and summary["policy_tasks"] == []


async def test_the_summary_averages_each_policys_verifier_metrics_over_its_finished_rollouts(gw):
    def metrics(**values) -> dict:
        return {"verifier": {"exit_code": 0, "metrics": values, "log": ""}}

    await publish(gw, 1)
    await ended(gw, "base", "a", "finished", {"verifier": 1.0}, "b1", reward_details=metrics(cases=5, tp=1))
    await ended(gw, "base", "a", "finished", {"verifier": 0.0}, "b2", reward_details=metrics(cases=2))
    await ended(gw, "base", "b", "failed", {}, "b3", reward_details=metrics(cases=100))  # failed: not averaged
    await ended(gw, "policy-v1", "a", "finished", {"verifier": 1.0}, "v1")  # no metrics recorded
    base, v1 = (await gw.http.get("/api/runs/eval/summary")).json()["policies"]
    assert base["metrics"] == {"cases": pytest.approx(3.5), "tp": pytest.approx(1.0)}
    assert v1["metrics"] == {}


def test_the_eval_tables_show_the_verifier_metrics_per_policy_only_when_there_are_some():
    from rich.console import Console

    from harnessrl.evaluation.view import final_tables

    row = {"asked": "base", "policy": "base", "tasks": 1, "rollouts": 2, "passed": 1, "pass_at_1": 0.5}
    row |= {"pass_at_k": 1.0, "k": 2, "reward_mean": 0.5, "reward_low": 0.0, "reward_high": 1.0, "failures": 0}
    document = {"run": "r", "tasks": ["a"], "k": 2, "harness": "builtin", "per_task": []}
    assert len(final_tables({**document, "policies": [{**row, "metrics": {}}]})) == 2
    tables = final_tables({**document, "policies": [{**row, "metrics": {"cases": 3.5}}]})
    console = Console(width=200, record=True)
    console.print(tables[-1])
    shown = console.export_text()
    assert "verifier metrics" in shown and "3.500" in shown
