"""What a quickstart plan sets up for the learner: rows that hold a step of an agent's samples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harnesses.agents import AGENTS
from harnessrl.training.quickstart_plan import QuickstartPlan, packed_row_tokens
from learner.packing import pack_samples


@dataclass
class Drawn:
    """A sample as packing reads it: the prompt (no loss), then what the policy sampled."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    old_logprobs: np.ndarray
    policy_versions: np.ndarray


def drawn(prompt: list[int], sampled: list[int]) -> Drawn:
    ids = np.asarray(prompt + sampled)
    mask = np.arange(len(ids)) >= len(prompt)
    return Drawn(ids, mask, np.where(mask, -1.0, 0.0), np.where(mask, 1, -1))


def test_a_cli_agents_learner_step_packs_as_one_tree_forwarding_its_first_prompt_once(tmp_path):
    # OpenCode on SmolLM2: the engine's context cut to the model's 8,192 positions.
    plan = QuickstartPlan(
        run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", harness="opencode",
        call_max_tokens=128, max_model_len=8192,
    )  # fmt: skip
    prompt = list(range(AGENTS["opencode"].first_prompt_tokens))
    step = [drawn(prompt, [50_000 + i] * 400) for i in range(plan.groups_per_step * plan.group_size)]
    packed = pack_samples(step, [1.0] * len(step), packed_row_tokens(plan))
    assert len(packed.rows) == 1 and not packed.refused
    assert packed_row_tokens(QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://")) == 8192


def test_an_agent_that_sends_text_after_the_task_still_packs_a_step_as_one_row(tmp_path):
    # Claude Code: the task, then a 2.3k-token system block, so samples share only what precedes the task.
    plan = QuickstartPlan(
        run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", harness="claude-code",
        call_max_tokens=128, max_model_len=15360,
    )  # fmt: skip
    agent = AGENTS["claude-code"]
    shared = list(range(agent.first_prompt_tokens - agent.tokens_after_task))
    step = [
        drawn(shared + [40_000 + i] * 12 + list(range(agent.tokens_after_task)), [50_000 + i] * 2 * 128)
        for i in range(plan.groups_per_step * plan.group_size)
    ]
    packed = pack_samples(step, [1.0] * len(step), packed_row_tokens(plan))
    assert len(packed.rows) == 1 and not packed.refused


async def test_the_policys_rounds_and_evaluations_take_the_plans_capture_and_demonstrations_the_engines(
    tmp_path, monkeypatch
):
    from harnessrl.training import quickstart as quickstart_module
    from harnessrl.training.quickstart import Quickstart
    from harnessrl.training.quickstart_evals import held_out_sets

    planned = []

    class Runner:
        def __init__(self, plan, client, on_result):
            planned.append(plan)

        async def run(self) -> None:
            return None

    monkeypatch.setattr(quickstart_module, "Runner", Runner)
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    plan = QuickstartPlan(
        run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", capture="tito", eval_every=1000
    )
    run = Quickstart(plan)
    await run._one_round(None, 0)
    await run._one_round(None, 0, run="q-warmup", phase="warm-up", teacher="solutions")
    assert [p.capture for p in planned] == ["tito", "engine"]
    [(_, held_out)] = held_out_sets(plan, run.agent, "http://127.0.0.1:9", "key", None)
    assert held_out.settings.capture == "tito"
