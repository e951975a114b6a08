"""eval_every: the base model, then every N versions, on the held-out split; numbers in the learner's metrics
and in `harnessrl report`."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

from harnesses.datasets import Selection, load_selection
from harnessrl.evaluation.evaluate import eval_harness
from harnessrl.evaluation.periodic import EvalEvery, PeriodicEval, eval_run_name, held_out_results
from harnessrl.reports.curves import write_report
from harnessrl.server import BackgroundGateway
from store.rollout_asks import PolicyPin
from store.store import Store
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply
from tests.waiting import wait_until

OPTIONS = {"isolation": "bwrap" if shutil.which("bwrap") else "subprocess"}
HELD_OUT = load_selection("builtin:arithmetic", Selection(split="test"))


def later_versions_know_more(body: dict) -> FakeReply:
    """policy-v2 and later answer the sum; the base model and policy-v1 do not."""
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", question).groups())
    version = int(body["model"].removeprefix("policy-v")) if body["model"].startswith("policy-v") else 0
    return FakeReply(content=str(a + b) if version >= 2 else "no idea")


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    fake_engine.script = later_versions_know_more
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        yield gateway


def publish(url: str, version: int) -> None:
    response = http.post(
        f"{url}/admin/adapters", headers=ADMIN_HEADERS, json={"version": version, "path": f"/adapters/v{version}"}
    )
    assert response.status_code == 200, response.text


async def test_the_base_model_then_every_second_version_is_evaluated_into_the_learners_metrics(
    live_gateway, sqlite_db, tmp_path
):
    store = Store.from_url(sqlite_db)
    try:
        await store.create_rollout("train-run", "t", "g")  # the training run, as the learner's steps need it
        run_id = await store.listings.run_id("train-run")
        for step, version in ((1, 0), (2, 1), (3, 2), (4, 2)):
            await store.training.record_step(run_id, step, {"step": step, "version": version, "loss": 0.5})
        settings = EvalEvery(
            every=2, tasks=HELD_OUT, harness=eval_harness("oneshot", "local"), k=2, sandbox_options=OPTIONS
        )
        periodic = PeriodicEval(settings, "train-run", live_gateway.url, TEST_ADMIN_KEY, store)
        base = await periodic.check()
        assert (base["eval_version"], base["eval_pass_at_1"], base["eval_rollouts"]) == (0, 0.0, 2 * len(HELD_OUT))
        publish(live_gateway.url, 1)
        assert await periodic.check() is None  # one version past the last evaluation: not due
        publish(live_gateway.url, 2)
        second = await periodic.check()
        assert (second["eval_version"], second["eval_pass_at_1"], second["eval_pass_at_k"]) == (2, 1.0, 1.0)
        assert await periodic.check() is None

        steps = dict(await store.training.learner_steps(run_id))
        assert steps[1]["eval_version"] == 0 and steps[1]["loss"] == 0.5  # merged, nothing lost
        assert steps[3]["eval_pass_at_1"] == 1.0 and "eval_version" not in steps[2] and "eval_version" not in steps[4]
        results = await held_out_results(store, "train-run")
        assert [(r.version, r.pass_at_1) for r in results] == [(0, 0.0), (2, 1.0)]
        assert await store.listings.run_id(eval_run_name("train-run")) is not None

        # a new process (a restarted train) knows what was evaluated: nothing is due until version 4
        again = PeriodicEval(settings, "train-run", live_gateway.url, TEST_ADMIN_KEY, store)
        assert await again.check() is None

        report = write_report(await store.reports.gather("train-run"), tmp_path, results)
        assert tmp_path / "eval_per_version.png" in report.paths
    finally:
        await store.close()


def test_the_training_thread_evaluates_beside_the_learner_and_stops_cleanly(live_gateway, sqlite_db):
    import httpx as client

    from harnessrl.evaluation.periodic import EvalThread

    settings = EvalEvery(
        every=1, tasks=HELD_OUT[:1], harness=eval_harness("oneshot", "local"), k=1, sandbox_options=OPTIONS
    )
    thread = EvalThread(
        PeriodicEval(settings, "train-run", live_gateway.url, TEST_ADMIN_KEY, store=None), sqlite_db, poll_s=0.2
    ).start()

    def finished() -> list[dict] | None:
        rows = client.get(
            f"{live_gateway.url}/api/rollouts", params={"run": "train-run-eval"}, headers=ADMIN_HEADERS, timeout=60
        ).json()["data"]
        return rows if rows and all(r["status"] == "finished" for r in rows) else None

    try:
        rows = wait_until(finished, "the evaluation's rollouts to finish", timeout_s=300, interval_s=0.2)
        assert [(r["pinned_version"], r["task"]) for r in rows] == [(0, HELD_OUT[0].name)]
    finally:
        thread.stop()
    assert not thread._thread.is_alive()


def test_eval_every_in_the_learner_config_needs_the_tasks_to_evaluate():
    from learner.config import ConfigError, LearnerConfig

    with pytest.raises(ConfigError, match="eval.every needs eval.tasks"):
        LearnerConfig().updated(eval={"every": 2})
    assert LearnerConfig().updated(eval={"every": 2, "tasks": "builtin:arithmetic"}).eval.k == 4


async def test_an_evaluation_runs_own_pinned_rollouts_are_its_report_results(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        for version, reward in ((0, 0.0), (0, 1.0), (3, 1.0)):
            identity = await store.create_rollout("my-eval", "t", f"g{version}", pin=PolicyPin(version))
            await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": reward})
        assert [(r.version, r.pass_at_1) for r in await held_out_results(store, "my-eval")] == [(0, 0.5), (3, 1.0)]
        assert await held_out_results(store, "no-such-run") == []
    finally:
        await store.close()


async def test_an_interrupted_evaluation_stops_its_caller_and_records_no_partial_score(sqlite_db, monkeypatch):
    import asyncio

    import harnessrl.evaluation.periodic as periodic_eval

    async def interrupted(plan, gateway_url, admin_key):  # Ctrl-C after one rollout of each task
        row = {"k": 1, "tasks": 2, "rollouts": 2, "pass_at_1": 0.0, "pass_at_k": 0.0, "reward_mean": 0.0}
        return {"policies": [{**row, "failures": 0}], "interrupted": True}

    monkeypatch.setattr(periodic_eval, "run_evaluation", interrupted)
    store = Store.from_url(sqlite_db)
    try:
        await store.create_rollout("train-run", "t", "g")
        run_id = await store.listings.run_id("train-run")
        await store.training.record_step(run_id, 1, {"step": 1, "version": 0, "loss": 0.5})
        settings = EvalEvery(every=1, tasks=HELD_OUT, harness=eval_harness("oneshot", "local"), k=4)
        periodic = PeriodicEval(settings, "train-run", "http://127.0.0.1:9", TEST_ADMIN_KEY, store)
        with pytest.raises(asyncio.CancelledError):
            await periodic.evaluate(0)
        assert not periodic.evaluated and periodic.results == {}
        assert "eval_version" not in dict(await store.training.learner_steps(run_id))[1]
    finally:
        await store.close()
