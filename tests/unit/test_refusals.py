"""A rollout whose agent never got an answer (its first prompt longer than the engine's context) says why:
the gateway notes refused main-loop calls, and the runner ends such a rollout failed with the cause."""

from __future__ import annotations

import pytest

from gateway.errors import EngineError, InvalidRequest
from gateway.request.refusals import EngineRefusals, refusal_cause
from store.records import RolloutIdentity
from tests.builders import chat_body

VLLM_PROMPT = (
    "This model's maximum context length is 8192 tokens. However, your prompt contains 13155 input tokens, "
    "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
)
VLLM_DECODER = "The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure..."
TITO = "the prompt has 5000 tokens; the engine's maximum context length is 4096 tokens"


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (VLLM_PROMPT, "first prompt 13,155 tokens > the engine's 8,192"),
        (VLLM_DECODER, "first prompt 9,000 tokens > the engine's 8,192"),
        (TITO, "first prompt 5,000 tokens > the engine's 4,096"),
        ("engine: temperature must be positive", "engine: temperature must be positive"),
    ],
)
def test_a_context_overflow_is_said_in_a_few_words(message, said):
    assert refusal_cause(message, first=True) == said


def test_a_prompt_counted_in_characters_is_not_read_as_tokens():
    chars = "This model's maximum context length is 8192 tokens. However, your prompt contains 90000 characters"
    assert refusal_cause(chars, first=False) == chars


def identity(rollout_id: int = 7) -> RolloutIdentity:
    return RolloutIdentity(rollout_id=rollout_id, run_id=1, token="t")


def refuse(refusals: EngineRefusals, body: dict, error: Exception) -> None:
    with pytest.raises(type(error)), refusals.noting(identity(), body):
        raise error


def test_refused_main_loop_calls_are_counted_and_side_calls_are_not():
    refusals = EngineRefusals()
    main = {"messages": [{"role": "user", "content": "fix it"}], "tools": [{"type": "function"}]}
    title = {"messages": [{"role": "system", "content": "You are a title generator."}]}
    refuse(refusals, title, EngineError(400, f"engine: {VLLM_PROMPT}"))
    refuse(refusals, main, EngineError(503, "engine: unreachable"))  # not a refusal of the request
    assert refusals.of(7) == (0, 0, None)
    refuse(refusals, main, EngineError(400, f"engine: {VLLM_PROMPT}"))
    refusals.answered(7, ["title"])  # the side call's answer is no answer to the agent's main loop
    assert refusals.of(7) == (0, 1, "first prompt 13,155 tokens > the engine's 8,192")
    refusals.answered(7, [])
    refuse(refusals, main, InvalidRequest(TITO))
    assert refusals.of(7) == (1, 2, "prompt 5,000 tokens > the engine's 4,096")
    refusals.forget(7)
    assert refusals.of(7) == (0, 0, None)


async def test_the_rollout_view_carries_the_refusals_of_a_prompt_over_the_engines_context(gateway):
    gateway.fake.max_model_len = 64
    rollout = await gateway.new_rollout()
    body = chat_body("x " * 200, tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}])
    reply = await gateway.agent.post(
        "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {rollout['token']}"}
    )
    assert reply.status_code == 400
    view = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()
    assert (view["answered_calls"], view["refused_calls"]) == (0, 1)
    assert view["last_refusal"].startswith("first prompt ") and view["last_refusal"].endswith("> the engine's 64")
