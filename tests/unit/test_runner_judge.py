"""The runner with an LLM judge: the builtin agent on a scripted engine through a real gateway, the
judge on a scripted OpenAI-compatible server reached through litellm."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness, BuiltinSettings
from harnesses.families import arithmetic_tasks
from harnesses.grading.judge import Judge, JudgeSettings
from harnesses.grading.rubric import Rubric
from harnessrl.server import BackgroundGateway
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply
from tests.judge_server import JudgeServer, Reply, nonce_of, user_text

TASKS = arithmetic_tasks(2)
AGENT = BuiltinSettings(max_turns=1, max_tokens=32, system=None, tools=False)


def answer_right(body: dict) -> FakeReply:
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", body["messages"][-1]["content"]).groups())
    return FakeReply(content=f"The answer is {a + b}.")


def group_judge(body: dict) -> Reply:
    labels = re.findall(r"=== Rollout (\w+) ===", user_text(body))
    entries = {label: {"score": 0.25 * (i + 1), "reasons": f"rank {i}"} for i, label in enumerate(labels)}
    return Reply(json.dumps({"verdict_id": nonce_of(body), "scores": entries}), prompt_tokens=400)


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    fake_engine.script = answer_right
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        yield gateway


def judged_plan(judge_server: JudgeServer, mode: str = "rollout", **overrides) -> RunPlan:
    judge = Judge(
        JudgeSettings(
            model="hosted_vllm/judge",
            rubric=Rubric("Reward correct, polite answers."),
            mode=mode,
            api_base=judge_server.api_base,
            timeout_s=60.0,  # a local judge, slow only when the machine is busy
            retries=0,
        )
    )
    fields = dict(
        run="judged",
        tasks=TASKS,
        harness=BuiltinHarness(AGENT),
        group_size=3,
        concurrency=4,
        sandbox=KINDS["local"],
        sandbox_options={"isolation": "bwrap"},
        judge=judge,
    )
    return RunPlan(**{**fields, **overrides})


async def test_each_finished_rollout_gets_the_judges_score_with_its_tokens_and_reasons(live_gateway):
    with JudgeServer(
        lambda body: Reply(json.dumps({"verdict_id": nonce_of(body), "score": 0.5, "reasons": "right, terse"}))
    ) as judge_server:
        client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
        results = await Runner(judged_plan(judge_server), client).run()
        view = await client.rollout(results[0].rollout_id)
        await client.close()
    assert sorted(r.reward for r in results) == [1.5] * 6  # verifier 1 + judge 0.5
    assert view["rewards"] == {"verifier": 1.0, "judge": 0.5}
    detail = view["reward_details"]["judge"]
    assert (detail["model"], detail["prompt_tokens"], detail["completion_tokens"]) == ("hosted_vllm/judge", 120, 30)
    assert detail["reasons"] == "right, terse" and not detail["abstained"]
    # the judge saw the conversation as the agent saw it (from the store), its answer and the verifier's result
    prompts = [user_text(body) for body in judge_server.requests]
    assert len(prompts) == 6 and all("[assistant] The answer is" in p and "Verifier: reward 1.0" in p for p in prompts)


async def test_a_group_judge_scores_each_tasks_rollouts_in_one_call_before_they_end(live_gateway):
    with JudgeServer(group_judge) as judge_server:
        client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
        # one rollout at a time: a group's first rollouts wait for the judge without holding a place
        results = await Runner(judged_plan(judge_server, "group", concurrency=1), client).run()
        groups = await client.groups("judged", "ready")
        views = [await client.rollout(r.rollout_id) for r in results]
        await client.close()
    assert len(judge_server.requests) == 2 and len(groups) == 2
    for task in TASKS:
        judged = sorted(v["rewards"]["judge"] for v in views if v["task"] == task.name)
        assert judged == [0.25, 0.5, 0.75]
    assert all(v["reward_details"]["judge"]["shared_by"] == 3 for v in views)


async def test_a_failing_judge_abstains_and_the_rollouts_still_finish_with_the_reason(live_gateway):
    with JudgeServer(lambda body: Reply("overloaded", status=503)) as judge_server:
        client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
        results = await Runner(judged_plan(judge_server, "group"), client).run()
        view = await client.rollout(results[0].rollout_id)
        await client.close()
    assert all(r.status == "finished" and r.reward == 1.0 for r in results)
    assert view["rewards"]["judge"] is None and view["reward_details"]["judge"]["abstained"]
    assert "ServiceUnavailableError" in view["reward_details"]["judge"]["reasons"]


async def test_reward_details_are_bounded_and_plain_json(live_gateway):
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    created = await client.create_rollout("details", "t", "g", 1, {})
    await client.close()
    async with httpx.AsyncClient(base_url=live_gateway.url, headers={"x-admin-key": TEST_ADMIN_KEY}) as http:
        finish = f"/api/rollouts/{created['id']}/end"
        too_big = {"status": "finished", "rewards": {"judge": 1.0}, "reward_details": {"judge": {"x": "y" * 20_000}}}
        refused = await http.post(finish, json=too_big)
        assert refused.status_code == 400 and "16384 bytes" in refused.text
        not_json = '{"status": "finished", "reward_details": {"judge": {"cost_usd": NaN}}}'
        response = await http.post(finish, content=not_json, headers={"content-type": "application/json"})
        assert response.status_code == 400
        assert (await http.get(f"/api/rollouts/{created['id']}")).json()["status"] == "running"
        anonymous = await httpx.AsyncClient(base_url=live_gateway.url).post(finish, json={"status": "finished"})
        assert anonymous.status_code == 401  # only the control plane writes rewards and their details


async def test_eval_judges_each_pinned_rollout(live_gateway):
    from harnessrl.evaluation.evaluate import EvalPlan, eval_harness, run_evaluation

    with JudgeServer(lambda body: Reply(json.dumps({"verdict_id": nonce_of(body), "score": 0.5}))) as judge_server:
        judge = judged_plan(judge_server).judge
        plan = EvalPlan(
            run="eval-judged",
            tasks=TASKS,
            harness=eval_harness("oneshot", "local"),
            policies=("base",),
            k=2,
            concurrency=4,
            sandbox_options={"isolation": "bwrap"},
            judge=judge,
        )
        await run_evaluation(plan, live_gateway.url, TEST_ADMIN_KEY)
        client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
        views = [await client.rollout(r["id"]) for r in await client.rollouts("eval-judged")]
        await client.close()
    assert len(views) == 4 and len(judge_server.requests) == 4
    assert all(v["rewards"]["judge"] == 0.5 and v["reward_details"]["judge"]["prompt_tokens"] == 120 for v in views)
