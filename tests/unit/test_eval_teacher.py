"""`harnessrl eval --policies base,latest,teacher:MODEL`: a teacher (a scripted OpenAI-compatible server
reached through litellm) evaluated on the same tasks and harness through a teacher gateway on the same
store, one table reading base / adapter / teacher, each row counted from its own rollouts."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

from harnesses.datasets import Selection, load_selection
from harnessrl.evaluation.evaluate import EvalPlan, eval_harness, resolve_policies, run_evaluation
from harnessrl.server import BackgroundGateway
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply
from tests.judge_server import JudgeServer, Reply

OPTIONS = {"isolation": "bwrap" if shutil.which("bwrap") else "subprocess"}
TASKS = load_selection("builtin:arithmetic", Selection(split="test"))
TEACHER = "teacher:hosted_vllm/big"


def numbers(body: dict) -> tuple[int, int]:
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return tuple(map(int, re.search(r"What is (\d+) \+ (\d+)", question).groups()))


def teacher_knows_even_sums(body: dict) -> Reply:
    a, b = numbers(body)
    return Reply(str(a + b) if (a + b) % 2 == 0 else "no idea")


def policy_v1_knows_all(body: dict) -> FakeReply:
    a, b = numbers(body)
    return FakeReply(content=str(a + b) if body["model"] == "policy-v1" else "maybe 1 2 3 4?")


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    fake_engine.script = policy_v1_knows_all
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        published = http.post(
            f"{gateway.url}/admin/adapters", headers=ADMIN_HEADERS, json={"version": 1, "path": "/adapters/v1"}
        )
        assert published.status_code == 200, published.text
        yield gateway


def test_a_teacher_is_a_policy_name_of_its_own():
    resolved = resolve_policies(("base", TEACHER, "latest", TEACHER), 2)
    assert [(p.asked, p.label, p.teacher) for p in resolved] == [
        ("base", "base", None),
        (TEACHER, TEACHER, "hosted_vllm/big"),
        ("latest", "policy-v2", None),
    ]
    with pytest.raises(ValueError, match="teacher:MODEL"):
        resolve_policies(("teacher:",), 0)


async def test_base_adapter_and_teacher_read_side_by_side(live_gateway, sqlite_db, tiny_model_dir):
    with JudgeServer(teacher_knows_even_sums) as upstream:
        plan = EvalPlan(
            run="ev",
            tasks=TASKS,
            harness=eval_harness("oneshot", "local"),
            k=2,
            concurrency=4,
            policies=("base", "latest", TEACHER),
            sandbox_options=OPTIONS,
            database_url=sqlite_db,
            policy_model=tiny_model_dir,
            teacher_base_url=upstream.api_base,
        )
        document = await run_evaluation(plan, live_gateway.url, TEST_ADMIN_KEY)
    assert len(upstream.requests) == 2 * len(TASKS)  # every teacher rollout, and only those, reached it
    even = sum(
        (a + b) % 2 == 0 for a, b in (map(int, re.search(r"(\d+) \+ (\d+)", t.instruction).groups()) for t in TASKS)
    )
    rows = {row["asked"]: row for row in document["policies"]}
    assert [row["policy"] for row in document["policies"]] == ["base", "policy-v1", TEACHER]
    assert (rows["base"]["passed"], rows["latest"]["passed"], rows[TEACHER]["passed"]) == (0, 2 * len(TASKS), 2 * even)
    assert rows[TEACHER]["rollouts"] == 2 * len(TASKS)
    rollouts = http.get(
        f"{live_gateway.url}/api/rollouts",
        params={"run": "ev-teacher:hosted_vllm_big", "limit": 100},
        headers=ADMIN_HEADERS,
    ).json()["data"]
    assert len(rollouts) == 2 * len(TASKS) and all(r["meta"]["teacher"] == "hosted_vllm/big" for r in rollouts)
    for row in document["per_task"]:
        assert set(row["policies"]) == {"base", "policy-v1", TEACHER}
