"""Teacher runs: the builtin agent served by an external model (a scripted OpenAI-compatible server
reached through litellm) via the teacher engine and a real gateway, recorded with the policy's token
ids, marked in each rollout's meta, and used by `harnessrl sft`."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness, BuiltinSettings
from harnesses.families import arithmetic_tasks
from harnessrl.teachers.teacher import PolicyRendering, TeacherSettings, teacher_gateway
from harnessrl.training.sft import successful_samples
from learner.groups import UnusableGroup, check_group, load_group
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from store.samples import build_samples
from store.store import Store
from tests.builders import TEST_ADMIN_KEY, call_record
from tests.judge_server import JudgeServer, Reply

TASKS = arithmetic_tasks(2)


def teacher_answers(body: dict) -> Reply:
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", body["messages"][-1]["content"]).groups())
    return Reply(f"{a + b}")


async def test_a_teacher_run_is_recorded_with_the_policys_tokens_and_marked(sqlite_db, tiny_model_dir):
    with JudgeServer(teacher_answers) as upstream:
        settings = TeacherSettings(
            model="hosted_vllm/teacher", tokenizer_dir=tiny_model_dir, api_base=upstream.api_base
        )
        with teacher_gateway(settings, sqlite_db, TEST_ADMIN_KEY) as url:
            client = GatewayClient(url, TEST_ADMIN_KEY)
            plan = RunPlan(
                run="teacher",
                tasks=TASKS,
                group_size=2,
                concurrency=4,
                sandbox=KINDS["local"],
                harness=BuiltinHarness(BuiltinSettings(max_turns=1, max_tokens=32, system=None, tools=False)),
                sandbox_options={"isolation": "bwrap"},
                capture="engine",
                teacher="hosted_vllm/teacher",
            )
            results = await Runner(plan, client).run()
            views = [await client.rollout(r.rollout_id) for r in results]
            listed = (await client._json("GET", "/api/calls", params={"limit": 100}))["data"]
            calls = [await client._json("GET", f"/api/calls/{c['id']}") for c in listed]
            await client.close()
    assert [r.reward for r in results] == [1.0] * 4  # the teacher's answers, verified
    assert all(v["meta"]["teacher"] == "hosted_vllm/teacher" for v in views)
    assert len(upstream.requests) == 4  # one per rollout: the gateway's capture probe never reached it
    rendering = PolicyRendering(tiny_model_dir)
    for call in calls:
        answer = call["response"]["choices"][0]["message"]["content"]
        assert rendering.tokenizer.decode(call["output_ids"]) == f"{answer}<|im_end|>"
        assert rendering.tokenizer.decode(call["prompt_ids"]).endswith("<|im_start|>assistant\n")
        assert call["output_logprobs"] is None and call["source"] == "teacher"  # nobody sampled these tokens
    store = Store.from_url(sqlite_db)
    try:
        samples, rollouts = await successful_samples(store, "teacher", 1.0)
        nodes = await store.calls.nodes(views[0]["id"])
    finally:
        await store.close()
    assert rollouts == 4 and len(samples) == 4 and len(build_samples(nodes)) == 1
    assert all(np.isnan(s.old_logprobs[s.loss_mask == 1]).all() for s in samples)  # never taken for a sampler's
    assert sorted(int(s.loss_mask.sum()) for s in samples) == sorted(len(c["output_ids"]) for c in calls), (
        [int(s.loss_mask.sum()) for s in samples],
        [len(c["output_ids"]) for c in calls],
    )


def test_the_policy_rendering_of_a_tool_call_is_what_the_template_writes(tiny_model_dir):
    rendering = PolicyRendering(tiny_model_dir)
    messages = [{"role": "user", "content": "list files"}]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    prompt = rendering.prompt(messages, tools)
    answer = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"c": "ls"}'}}],
    }
    text = rendering.answer(messages, tools, answer, prompt)
    assert text.endswith("<|im_end|>") and "<tool_call>" in text and json.dumps({"c": "ls"}) in text


async def test_the_learner_refuses_a_group_a_teacher_served_and_takes_a_policy_group(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        groups = {}
        for task, meta in (("taught", {"teacher": "openai/gpt-4o"}), ("sampled", {})):
            for reward in (0.0, 1.0):
                identity = await store.create_rollout("mixed", task, "r0", meta, group_size=2)
                await store.insert_calls([call_record(identity.rollout_id)])
                await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": reward})
                groups[task] = (await store.get_rollout(identity.rollout_id))[0].group_id
        taught, sampled = await load_group(store, groups["taught"]), await load_group(store, groups["sampled"])
    finally:
        await store.close()
    with pytest.raises(UnusableGroup, match="teacher openai/gpt-4o.*harnessrl sft"):
        check_group(taught, 1.0)
    check_group(sampled, 1.0)  # the policy's own rollouts train as before


async def test_the_learner_refuses_tokens_without_sampler_logprobs_even_outside_a_teacher_run(sqlite_db):
    """A call recorded with no log-probs (source "demonstration") in a group whose rollouts name no
    teacher: the NaN the store reads for them never reaches the GRPO loss."""
    store = Store.from_url(sqlite_db)
    try:
        for reward in (0.0, 1.0):
            identity = await store.create_rollout("unmarked", "task", "r0", {}, group_size=2)
            record = call_record(identity.rollout_id, output_logprobs=None, source="demonstration")
            await store.insert_calls([record])
            await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": reward})
        group = await load_group(store, (await store.get_rollout(identity.rollout_id))[0].group_id)
    finally:
        await store.close()
    with pytest.raises(UnusableGroup, match="did not sample.*harnessrl sft"):
        check_group(group, 1.0)
