"""Demonstrations through a real agent's own loop: pi (the pinned binary, unmodified) in bubblewrap
sandboxes, served by the solutions teacher through a real gateway, on two builtin:shell tasks and a
public-style Harbor task built from its own Dockerfile. Each rollout is pi's bash call running the
task's solution and pi's final answer: two calls, the second extending the first exactly, recorded in
the policy's token ids, verified, and trained on by one SFT step."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from contracts.gateway_client import GatewayClient
from harnesses.agents import create
from harnesses.shell_family import shell_tasks
from harnesses.task import load_harbor
from harnessrl.teachers.demonstrations import FINAL, SOLUTIONS, demonstrator
from harnessrl.teachers.teacher import PolicyRendering, TeacherSettings, teacher_gateway
from harnessrl.training.sft import SftPlan, run_sft
from learner.config import LearnerConfig
from learner.sft import SftConfig
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from store.samples import build_samples
from store.store import Store
from tests.builders import TEST_ADMIN_KEY

HARBOR = Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public" / "csv-total"
SHELL = [t for t in shell_tasks() if t.name.startswith(("shell-count-", "shell-rename-"))][::6]


async def demonstrations(tasks, sqlite_db: str, model_dir: Path) -> tuple[list, list[list[dict]]]:
    pi = create("pi", sandbox="local")
    settings = TeacherSettings(model=SOLUTIONS, tokenizer_dir=model_dir, max_model_len=8192)
    with teacher_gateway(settings, sqlite_db, TEST_ADMIN_KEY, demonstrator(SOLUTIONS, tasks, pi)) as url:
        client = GatewayClient(url, TEST_ADMIN_KEY)
        plan = RunPlan(
            run="demos",
            tasks=tasks,
            harness=pi,
            group_size=1,
            concurrency=3,
            sandbox=KINDS["local"],
            sandbox_options={"isolation": "bwrap"},
            capture="engine",
            teacher=SOLUTIONS,
        )
        try:
            results = await Runner(plan, client).run()
            calls = [
                [await client._json("GET", f"/api/calls/{c['id']}") for c in await client.calls(r.rollout_id)]
                for r in results
            ]
        finally:
            await client.close()
    return results, calls


async def test_pi_plays_each_tasks_solution_as_its_own_bash_call_and_sft_trains_on_it(
    sqlite_db, tiny_model_dir, tmp_path
):
    tasks = [*SHELL, load_harbor(HARBOR)]
    results, calls = await demonstrations(tasks, sqlite_db, tiny_model_dir)
    assert [r.reward for r in results] == [1.0] * len(tasks), [r.status for r in results]
    rendering = PolicyRendering(tiny_model_dir)
    by_name = {t.name: t for t in tasks}
    for result, rollout_calls in zip(results, calls):
        first, answer = sorted(rollout_calls, key=lambda c: c["id"])
        assert answer["parent_id"] == first["id"] and answer["fork_of"] is None  # exact extension
        assert {(c["source"], c["output_logprobs"]) for c in (first, answer)} == {("demonstration", None)}
        [call] = first["response"]["choices"][0]["message"]["tool_calls"]
        assert call["function"]["name"] == "bash"
        assert json.loads(call["function"]["arguments"])["command"] == by_name[result.task].solution.strip()
        sampled = rendering.tokenizer.decode(first["output_ids"])
        assert sampled.startswith("<tool_call>") and sampled.endswith("</tool_call><|im_end|>")
        assert rendering.tokenizer.decode(answer["output_ids"]) == f"{FINAL}<|im_end|>"

    store = Store.from_url(sqlite_db)
    try:
        nodes = [await store.calls.nodes(r.rollout_id) for r in results]
    finally:
        await store.close()
    assert [len(build_samples(n)) for n in nodes] == [1] * len(tasks)  # one two-turn sample per rollout

    learner = LearnerConfig(model_dir=str(tiny_model_dir), lora={"rank": 4}, optimizer={"lr": 1e-3})
    plan = SftPlan(run="demos", database_url=sqlite_db, learner=learner, out_dir=tmp_path / "sft",
                   sft=SftConfig(epochs=1, token_budget=8192), min_reward=1.0)  # fmt: skip
    outcome = await asyncio.to_thread(run_sft, plan)  # it runs its own event loop
    assert outcome.rollouts == len(tasks) and outcome.result.samples == len(tasks)
    assert len(outcome.result.steps) == 1 and outcome.result.steps[0].tokens == sum(
        len(c["output_ids"]) for rollout_calls in calls for c in rollout_calls
    )
    assert (outcome.adapter / "adapter_config.json").exists()
