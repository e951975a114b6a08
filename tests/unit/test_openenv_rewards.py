"""OpenEnv rubrics where `--reward module:function` goes: scored with (final answer, observation), abstaining on failure."""

from __future__ import annotations

import asyncio

import pytest

from harnesses.grading.reward_functions import load_reward_function
from harnesses.grading.verify import Verdict
from harnesses.harness import AgentOutcome
from harnesses.task import Task
from tests.judge_server import JudgeServer, Reply

TASK = Task(name="sum", instruction="What is 40 + 2?")


def context(answer: str, verifier: float | None = 1.0) -> dict:
    return {
        "task": TASK,
        "rollout": {"id": 7},
        "verdict": Verdict(verifier, 0, "ok"),
        "outcome": AgentOutcome(final_text=answer, log="", exit_code=0),
    }


async def test_a_rubric_instance_scores_the_final_answer():
    reward = load_reward_function("tests.openenv_rubrics:answer_is_42")
    assert await reward(**context("42")) == 1.0 and await reward(**context("41")) == 0.0
    assert reward.name == "tests.openenv_rubrics:answer_is_42"


async def test_a_rubric_class_is_instantiated_and_reads_the_observation():
    reward = load_reward_function("tests.openenv_rubrics:VerifierTimesLength")
    assert await reward(**context("42", verifier=1.0)) == pytest.approx(1 / 3)
    assert await reward(**context("42", verifier=None)) == 0.0


async def test_containers_combine_their_children():
    reward = load_reward_function("tests.openenv_rubrics:blend")
    assert await reward(**context("42", verifier=1.0)) == pytest.approx(0.5 + 0.5 / 3)


async def test_a_trajectory_rubric_scores_each_rollout_on_its_own():
    reward = load_reward_function("tests.openenv_rubrics:steps")
    scores = await asyncio.gather(*(reward(**context(str(i))) for i in range(5)))
    assert scores == [1.0] * 5  # a shared, unreset trajectory would give 1/2, 1/3, ...


async def test_a_broken_rubric_raises_for_the_runner_to_abstain():
    reward = load_reward_function("tests.openenv_rubrics:broken")
    with pytest.raises(RuntimeError, match="the rubric broke"):
        await reward(**context("42"))


async def test_an_llm_judge_scores_through_an_openai_compatible_endpoint(monkeypatch):
    with JudgeServer(lambda body: Reply("0.75")) as server:
        monkeypatch.setenv("HARNESSRL_TEST_JUDGE_URL", server.api_base)
        reward = load_reward_function("tests.openenv_rubrics:EnvJudge")
        assert await reward(**context("42")) == 0.75
        [request] = server.requests
    assert (
        "What is 40 + 2?" in request["messages"][-1]["content"] and "Answer: 42" in request["messages"][-1]["content"]
    )


async def test_an_llm_judge_without_a_score_in_its_reply_abstains(monkeypatch):
    with JudgeServer(lambda body: Reply("I cannot tell.")) as server:
        monkeypatch.setenv("HARNESSRL_TEST_JUDGE_URL", server.api_base)
        reward = load_reward_function("tests.openenv_rubrics:EnvJudge")
        assert await reward(**context("42")) is None  # not LLMJudge's default_score 0.0


async def test_an_llm_judge_whose_endpoint_fails_raises_for_the_runner_to_abstain(monkeypatch):
    with JudgeServer(lambda body: Reply("overloaded", status=400)) as server:
        monkeypatch.setenv("HARNESSRL_TEST_JUDGE_URL", server.api_base)
        reward = load_reward_function("tests.openenv_rubrics:EnvJudge")
        with pytest.raises(Exception, match="overloaded"):
            await reward(**context("42"))


def test_plain_functions_are_untouched():
    reward = load_reward_function("math:isfinite")
    assert reward.function.__name__ == "isfinite"
