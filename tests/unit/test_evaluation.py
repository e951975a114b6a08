"""`harnessrl eval` against a scripted engine: each rollout served by its pinned policy, numbers from the store."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator

import pytest
from rich.console import Console

from harnesses.datasets import Selection, load_selection
from harnessrl.evaluation.evaluate import EvalPlan, eval_harness, evaluate, resolve_policies, run_evaluation
from harnessrl.server import BackgroundGateway
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply

OPTIONS = {"isolation": "bwrap" if shutil.which("bwrap") else "subprocess"}
TASKS = load_selection("builtin:arithmetic", Selection(split="test"))


def adapter_knows_arithmetic(body: dict) -> FakeReply:
    """The scripted policies: policy-v1 answers the sum, the base model (and any other) rambles."""
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", question).groups())
    return FakeReply(content=str(a + b) if body["model"] == "policy-v1" else "I am not sure, maybe 1 2 3 4?")


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    fake_engine.script = adapter_knows_arithmetic
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        published = http.post(
            f"{gateway.url}/admin/adapters", headers=ADMIN_HEADERS, json={"version": 1, "path": "/adapters/v1"}
        )
        assert published.status_code == 200, published.text
        yield gateway


def plan(**overrides) -> EvalPlan:
    fields = dict(
        run="eval-test",
        tasks=TASKS,
        harness=eval_harness("oneshot", "local"),
        policies=("base", "latest"),
        k=3,
        concurrency=4,
        sandbox_options=OPTIONS,
    )
    return EvalPlan(**{**fields, **overrides})


def store_counts(gateway_url: str, run: str) -> dict[int, tuple[int, int]]:
    """An independent count from the store: (rollouts, rewards of 1) per pinned version."""
    rows = http.get(f"{gateway_url}/api/rollouts", params={"run": run, "limit": 1000}, headers=ADMIN_HEADERS)
    counts: dict[int, tuple[int, int]] = {}
    for rollout in rows.json()["data"]:
        n, passed = counts.get(rollout["pinned_version"], (0, 0))
        counts[rollout["pinned_version"]] = (n + 1, passed + (rollout["reward"] == 1.0))
    return counts


async def test_each_policy_is_evaluated_pinned_and_the_numbers_are_the_stores(live_gateway, tmp_path):
    document = await run_evaluation(plan(), live_gateway.url, TEST_ADMIN_KEY)
    base, latest = document["policies"]
    assert (base["asked"], base["policy"], latest["asked"], latest["policy"]) == ("base", "base", "latest", "policy-v1")
    assert (base["rollouts"], base["passed"], base["pass_at_1"], base["pass_at_k"]) == (3 * len(TASKS), 0, 0.0, 0.0)
    assert (latest["rollouts"], latest["passed"], latest["pass_at_1"], latest["pass_at_k"]) == (
        3 * len(TASKS),
        3 * len(TASKS),
        1.0,
        1.0,
    )
    assert latest["k"] == 3 and latest["reward_mean"] == 1.0 and base["failures"] == 0
    assert store_counts(live_gateway.url, "eval-test") == {0: (3 * len(TASKS), 0), 1: (3 * len(TASKS), 3 * len(TASKS))}
    assert [row["task"] for row in document["per_task"]] == [t.name for t in TASKS]
    assert all(
        row["policies"] == {"base": {"rollouts": 3, "passed": 0}, "policy-v1": {"rollouts": 3, "passed": 3}}
        for row in document["per_task"]
    )
    again = await run_evaluation(plan(), live_gateway.url, TEST_ADMIN_KEY)  # resumes: nothing left to run
    assert again["policies"] == document["policies"]


async def test_evaluate_prints_the_table_and_writes_eval_json_and_a_png(live_gateway, tmp_path):
    console = Console(record=True, width=160)
    document = await _in_thread(
        lambda: evaluate(plan(policies=("policy-v1",), k=2), live_gateway.url, TEST_ADMIN_KEY, tmp_path, console)
    )
    written = json.loads((tmp_path / "eval.json").read_text())
    assert written["policies"] == document["policies"] and written["k"] == 2
    assert (tmp_path / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = console.export_text()
    assert "policy-v1" in text and "100.0%" in text and "successes per task" in text


async def test_an_unpublished_policy_stops_the_evaluation_with_the_gateways_reason(live_gateway):
    with pytest.raises(RuntimeError, match="policy-v5 was never published"):
        await run_evaluation(plan(policies=("policy-v5",)), live_gateway.url, TEST_ADMIN_KEY)


async def test_a_new_policy_with_no_rollout_yet_is_evaluated_as_the_base_model(live_gateway):
    """A quickstart's first evaluation (the base model) comes before its policy's first rollout."""
    document = await run_evaluation(
        plan(run="new-policy-eval", policies=("base", "latest"), policy="fresh", k=1), live_gateway.url, TEST_ADMIN_KEY
    )
    assert [row["policy"] for row in document["policies"]] == ["base"]  # latest of a new policy is its base model
    with pytest.raises(RuntimeError, match="no policy 'nobody' on this server; known policies: .*fresh"):
        await run_evaluation(plan(run="other-eval", policies=("nobody@latest",)), live_gateway.url, TEST_ADMIN_KEY)


def test_latest_is_read_once_and_duplicates_collapse():
    assert [(p.asked, p.label) for p in resolve_policies(("base", "latest", "policy-v4", "base"), 4)] == [
        ("base", "base"),
        ("latest", "policy-v4"),
    ]
    assert resolve_policies(("latest",), 0)[0].label == "base"
    with pytest.raises(ValueError, match="--policies takes"):
        resolve_policies(("v3",), 3)


async def _in_thread(work):
    import asyncio

    return await asyncio.to_thread(work)  # evaluate() runs its own event loop, as the CLI does


async def test_sigterm_stops_an_evaluations_jobs_and_the_evaluation_goes_on_to_its_numbers():
    import os
    import signal

    from harnessrl.evaluation.evaluate import _run_until_stopped

    started, finished = asyncio.Event(), []

    async def jobs() -> None:
        started.set()
        await asyncio.sleep(600)
        finished.append(True)

    async def terminate() -> None:
        await started.wait()
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = asyncio.create_task(terminate())
    assert await _run_until_stopped(jobs()) is True and not finished
    await stopper
    assert await _run_until_stopped(asyncio.sleep(0)) is False  # jobs that end are no interruption
