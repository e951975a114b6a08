"""The Anthropic Messages dialect through the official SDK, against the fake engine, recorded in SQLite."""

from __future__ import annotations

import json

import pytest

from tests.anthropic_calls import EPHEMERAL, HI, WEATHER, patch_engine_answer, recorded_calls, sdk
from tests.fake_tokens import FakeReply, decode, logprob_at, render_chat

# --- serving and recording -----------------------------------------------------------------


async def test_message_records_exact_prompt_and_sampled_tokens(gateway, sdk_http):
    rollout = await gateway.new_rollout()
    client = sdk(sdk_http, rollout["base_url"])
    message = await client.messages.create(model="policy", max_tokens=64, system="Be brief.", messages=HI)

    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello from the fake engine."
    assert message.model == "policy" and message.role == "assistant" and message.stop_reason == "end_turn"
    [call] = await recorded_calls(gateway, rollout["id"])
    assert call["dialect"] == "messages"
    assert call["prompt_ids"] == render_chat([{"role": "system", "content": "Be brief."}, *HI])
    assert decode(call["output_ids"][:-1]) == "Hello from the fake engine."
    assert message.usage.input_tokens == len(call["prompt_ids"])
    assert message.usage.output_tokens == len(call["output_ids"]) == len(call["output_logprobs"])
    assert call["output_logprobs"] == pytest.approx([logprob_at(n) for n in range(len(call["output_ids"]))])


async def test_client_body_is_stored_verbatim_and_the_call_id_is_a_header(gateway, sdk_http):
    rollout = await gateway.new_rollout()
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": HI,
        "metadata": {"user_id": "u1"},
        "service_tier": "auto",
    }  # an extra field is accepted and kept with the call
    response = await gateway.http.post("/v1/messages", json=body, headers={"x-api-key": rollout["token"]})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "claude-sonnet-4-5"
    [call] = await recorded_calls(gateway, rollout["id"])
    assert response.headers["x-harnessrl-call-id"] == str(call["id"])
    detail = (await gateway.http.get(f"/api/calls/{call['id']}")).json()
    assert detail["request"] == body and detail["response"]["object"] == "chat.completion"


async def test_engine_gets_a_translated_chat_body(gateway, sdk_http):
    await sdk(sdk_http).messages.create(
        model="policy",
        max_tokens=40,
        system=[{"type": "text", "text": "One."}, {"type": "text", "text": "Two.", "cache_control": EPHEMERAL}],
        messages=HI,
        stop_sequences=["END"],
        tools=[WEATHER],
        tool_choice={"type": "auto"},
        metadata={"user_id": "u1"},
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 20},
    )  # sampling knobs this SDK no longer types
    sent = gateway.fake.requests[-1]
    assert sent["messages"] == [{"role": "system", "content": "One.\nTwo."}, *HI]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    sampling = (sent["max_tokens"], sent["stop"], sent["temperature"], sent["top_p"], sent["top_k"])
    assert sampling == (40, ["END"], 0.5, 0.9, 20)
    assert sent["tool_choice"] == "auto" and sent["add_generation_prompt"] is True
    assert sent["stream"] is False and sent["return_token_ids"] is True and sent["logprobs"] is True
    assert "metadata" not in sent and "system" not in sent and sent["model"] == "fake-base"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
        ({"type": "any", "disable_parallel_tool_use": True}, {"tool_choice": "required", "parallel_tool_calls": False}),
    ],
)
async def test_tool_choice_translates_to_chat(gateway, sdk_http, choice, expected):
    await sdk(sdk_http).messages.create(model="policy", max_tokens=8, messages=HI, tools=[WEATHER], tool_choice=choice)
    sent = gateway.fake.requests[-1]
    assert {key: sent.get(key) for key in expected} == expected


# --- streaming -----------------------------------------------------------------------------


async def test_stream_helper_rebuilds_the_same_message(gateway, sdk_http):
    rollout = await gateway.new_rollout()
    client = sdk(sdk_http, api_key=rollout["token"])
    async with client.messages.stream(model="policy", max_tokens=64, messages=HI) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text == final.content[0].text == "Hello from the fake engine."
    [call] = await recorded_calls(gateway, rollout["id"])
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == len(call["output_ids"])
    assert final.usage.input_tokens == len(call["prompt_ids"])


async def test_create_with_stream_emits_anthropic_events_in_order(gateway, sdk_http):
    gateway.fake.script = [FakeReply(content="Checking.", tool_calls=(("get_weather", {"city": "Paris"}),))]
    stream = await sdk(sdk_http).messages.create(
        model="policy", max_tokens=64, messages=HI, tools=[WEATHER], stream=True
    )
    events = [event async for event in stream]
    types = [e.type for e in events]
    assert [t for n, t in enumerate(types) if n == 0 or t != types[n - 1]] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0].message.usage.input_tokens > 0 and events[0].message.stop_reason is None
    text = [e.delta.text for e in events if e.type == "content_block_delta" and e.index == 0]
    assert events[1].content_block.type == "text" and len(text) > 1 and "".join(text) == "Checking."  # as sampled
    start, delta, _, end, _ = events[-5:]
    assert start.content_block.type == "tool_use" and start.content_block.input == {}
    assert json.loads(delta.delta.partial_json) == {"city": "Paris"}
    assert end.delta.stop_reason == "tool_use" and end.usage.output_tokens > 0


async def test_raw_stream_is_named_sse_events_with_a_ping(gateway):
    response = await gateway.http.post(
        "/v1/messages", json={"model": "policy", "max_tokens": 8, "messages": HI, "stream": True}
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [
        frame for frame in response.text.split("\n\n") if frame and not frame.startswith(":")
    ]  # comments: the call id
    names = [frame.split("\n")[0].removeprefix("event: ") for frame in frames]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    for name, frame in zip(names, frames):
        assert json.loads(frame.split("\n")[1].removeprefix("data: "))["type"] == name


# --- tools and thinking --------------------------------------------------------------------


async def test_tool_use_round_trip(gateway, sdk_http):
    gateway.fake.script = [
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="It is sunny in Paris."),
    ]
    rollout = await gateway.new_rollout()
    client = sdk(sdk_http, api_key=rollout["token"])
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    async with client.messages.stream(model="policy", max_tokens=64, messages=messages, tools=[WEATHER]) as stream:
        first = await stream.get_final_message()
    [tool_use] = first.content
    assert first.stop_reason == "tool_use"
    assert (tool_use.type, tool_use.name, tool_use.input) == ("tool_use", "get_weather", {"city": "Paris"})

    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": tool_use.id, "content": [{"type": "text", "text": "sunny"}]}
            ],
        },
    ]
    final = await client.messages.create(model="policy", max_tokens=64, messages=messages, tools=[WEATHER])
    assert final.content[0].text == "It is sunny in Paris." and final.stop_reason == "end_turn"

    sent = gateway.fake.requests[-1]["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": tool_use.id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "tool_call_id": tool_use.id, "content": "sunny"}
    calls = await recorded_calls(gateway, rollout["id"])
    assert [(c["dialect"], c["finish_reason"]) for c in calls] == [("messages", "tool_calls"), ("messages", "stop")]
    assert calls[1]["prompt_ids"] == render_chat(sent)


async def test_tool_results_become_tool_messages_in_order(gateway, sdk_http):
    history = [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "London"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "rain", "is_error": False},
                {"type": "text", "text": "Summarize."},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "A note."}},
            ],
        },
    ]
    await sdk(sdk_http).messages.create(model="policy", max_tokens=8, messages=history, tools=[WEATHER])
    sent = gateway.fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[1]["content"] == "Looking." and [c["id"] for c in sent[1]["tool_calls"]] == ["toolu_a", "toolu_b"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:4]] == [("toolu_a", "sunny"), ("toolu_b", "rain")]
    assert sent[4] == {"role": "user", "content": "Summarize.\nA note."}


async def test_thinking_blocks_in_history_become_reasoning_content(gateway, sdk_http):
    history = [
        *HI,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "They greet me.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Hello!"},
            ],
        },
        {"role": "user", "content": "Again?"},
    ]
    await sdk(sdk_http).messages.create(
        model="policy", max_tokens=8, messages=history, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    sent = gateway.fake.requests[-1]
    assert sent["messages"][1] == {"role": "assistant", "content": "Hello!", "reasoning_content": "They greet me."}
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}


async def test_engine_reasoning_becomes_a_thinking_block_streamed_or_not(gateway, sdk_http):
    gateway.fake.script = [FakeReply(reasoning="Think first.", content="Hello from the fake engine.")] * 2
    client = sdk(sdk_http)
    message = await client.messages.create(model="policy", max_tokens=64, messages=HI)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Think first." and message.content[0].signature == ""
    async with client.messages.stream(model="policy", max_tokens=64, messages=HI) as stream:
        events = [event async for event in stream]
        streamed = await stream.get_final_message()
    assert [b.to_dict() for b in streamed.content] == [b.to_dict() for b in message.content]
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert [d for n, d in enumerate(deltas) if n == 0 or d != deltas[n - 1]] == [
        "thinking_delta",
        "signature_delta",
        "text_delta",
    ]


async def test_unparsable_tool_arguments_are_kept_raw_and_sent_back_verbatim(gateway, sdk_http):
    gateway.fake.script = [FakeReply(tool_calls=(("get_weather", '{"city": "Par'),)), FakeReply(content="ok")]
    client = sdk(sdk_http)
    async with client.messages.stream(model="policy", max_tokens=64, messages=HI, tools=[WEATHER]) as stream:
        first = await stream.get_final_message()
    assert first.content[0].input == {"_raw": '{"city": "Par'}
    history = [
        *HI,
        {"role": "assistant", "content": [first.content[0].model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": first.content[0].id,
                    "content": "bad arguments",
                    "is_error": True,
                }
            ],
        },
    ]
    await client.messages.create(model="policy", max_tokens=64, messages=history, tools=[WEATHER])
    assert gateway.fake.requests[-1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'


async def test_stop_reasons(gateway, sdk_http, monkeypatch):
    gateway.fake.script = [FakeReply(content="abc", finish_reason="length"), FakeReply(content="abc")]
    client = sdk(sdk_http)
    assert (await client.messages.create(model="policy", max_tokens=4, messages=HI)).stop_reason == "max_tokens"
    patch_engine_answer(gateway, monkeypatch, lambda choice: choice.update(stop_reason="END"))
    message = await client.messages.create(model="policy", max_tokens=64, messages=HI, stop_sequences=["END"])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")


# --- count_tokens --------------------------------------------------------------------------


async def test_count_tokens_is_the_prompt_the_engine_would_see_and_records_nothing(gateway, sdk_http):
    rollout = await gateway.new_rollout()
    client = sdk(sdk_http, rollout["base_url"])
    request = {"model": "policy", "system": "Be brief.", "messages": HI, "tools": [WEATHER]}
    counted = await client.messages.count_tokens(**request)
    assert counted.input_tokens == len(render_chat([{"role": "system", "content": "Be brief."}, *HI]))
    assert await recorded_calls(gateway, rollout["id"]) == [] and gateway.fake.requests == []
    message = await client.messages.create(max_tokens=8, **request)
    assert message.usage.input_tokens == counted.input_tokens


# --- bad input -----------------------------------------------------------------------------
