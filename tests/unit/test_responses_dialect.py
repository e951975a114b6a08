"""The Responses dialect through the official SDK, against the fake engine, recorded in SQLite."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.builders import gateway_settings
from tests.fake_tokens import FakeReply, decode, logprob_at, render_chat
from tests.gateway_harness import start_gateway

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
CHAT_WEATHER_TOOL = {"type": "function", "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"}}


async def recorded_calls(gateway, rollout_id: int) -> list[dict]:
    response = await gateway.http.get(f"/api/rollouts/{rollout_id}/calls")
    assert response.status_code == 200
    return response.json()["data"]


def rollout_client(gateway, rollout: dict):
    return gateway.openai(rollout["base_url"].replace("http://testserver", "http://gateway"))


async def test_response_records_exact_prompt_and_sampled_tokens_as_responses_dialect(gateway):
    rollout = await gateway.new_rollout()
    response = await rollout_client(gateway, rollout).responses.create(model="policy", input="Hi")

    assert response.output_text == "Hello from the fake engine."
    assert response.status == "completed" and response.model == "policy"
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")
    [call] = await recorded_calls(gateway, rollout["id"])
    assert call["dialect"] == "responses"
    assert call["prompt_ids"] == render_chat([{"role": "user", "content": "Hi"}])
    assert decode(call["output_ids"][:-1]) == "Hello from the fake engine."
    assert len(call["output_ids"]) == response.usage.output_tokens
    assert len(call["prompt_ids"]) == response.usage.input_tokens
    assert call["output_logprobs"] == pytest.approx([logprob_at(n) for n in range(len(call["output_ids"]))])
    detail = (await gateway.http.get(f"/api/calls/{call['id']}")).json()
    assert detail["request"] == {"model": "policy", "input": "Hi"}


async def test_call_id_header_names_the_recorded_call(gateway):
    response = await gateway.http.post("/v1/responses", json={"model": "policy", "input": "Hi"})
    assert response.status_code == 200
    detail = (await gateway.http.get(f"/api/calls/{response.headers['x-harnessrl-call-id']}")).json()
    assert detail["dialect"] == "responses"


async def test_instructions_and_message_items_become_chat_messages(gateway):
    rollout = await gateway.new_rollout(sampling={"temperature": 0.5})  # a training run sets the temperature
    await rollout_client(gateway, rollout).responses.create(
        model="policy",
        instructions="Be brief.",
        max_output_tokens=64,
        temperature=0.5,
        input=[
            {"role": "developer", "content": "Answer in French."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        ],
    )

    expected = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]
    sent = gateway.fake.requests[-1]
    assert sent["messages"] == expected
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.5 and "max_output_tokens" not in sent
    [call] = await recorded_calls(gateway, rollout["id"])
    assert call["prompt_ids"] == render_chat(expected)


async def test_history_items_fold_into_assistant_turns_and_tool_messages(gateway):
    history = [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Two calls."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city":"London"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "Dropped."}]},
        {"role": "user", "content": "Thanks."},
    ]
    await gateway.openai().responses.create(model="policy", input=history, tools=[WEATHER_TOOL])

    sent = gateway.fake.requests[-1]
    assert sent["messages"] == [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Checking."}],
            "reasoning_content": "Two calls.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"London"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
        {"role": "user", "content": "Thanks."},
    ]
    assert sent["tools"] == [CHAT_WEATHER_TOOL]


async def test_streamed_response_streams_every_event_in_order(gateway):
    stream = await gateway.openai().responses.create(model="policy", input="Hi", stream=True)
    events = [event async for event in stream]

    types = [e.type for e in events]
    assert [t for n, t in enumerate(types) if n == 0 or t != types[n - 1]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "Hello from the fake engine."  # as sampled, token by token
    final = events[-1].response
    assert final.status == "completed" and final.output_text == "Hello from the fake engine."
    assert final.id == events[0].response.id and final.output[0].id == events[2].item.id


async def test_stream_is_server_sent_events_with_named_events_and_no_done(gateway):
    response = await gateway.http.post("/v1/responses", json={"model": "policy", "input": "Hi", "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in response.text.split("\n\n") if b and not b.startswith(":")]  # comments: the call id
    for block in blocks:
        event_line, data_line = block.split("\n")
        assert event_line.removeprefix("event: ") == json.loads(data_line.removeprefix("data: "))["type"]
    assert "[DONE]" not in response.text and blocks[-1].startswith("event: response.completed\n")


async def test_sdk_stream_helper_assembles_the_final_response(gateway):
    async with gateway.openai().responses.stream(model="policy", input="Hi") as stream:
        deltas = [event.delta async for event in stream if event.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Hello from the fake engine."
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens


async def test_function_call_round_trip_with_reserialized_arguments(gateway):
    gateway.fake.script = [
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="It is sunny in Paris."),
    ]
    rollout = await gateway.new_rollout()
    client = rollout_client(gateway, rollout)
    question = {"role": "user", "content": "Weather in Paris?"}
    stream = await client.responses.create(
        model="policy",
        input=[question],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        stream=True,
    )
    events = [event async for event in stream]
    kinds = [e.type for e in events if "function_call_arguments" in e.type]
    # The arguments stream as sampled (the fake engine sends them in halves), then done.
    assert kinds == ["response.function_call_arguments.delta"] * 2 + ["response.function_call_arguments.done"]
    [call] = events[-1].response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.id.startswith("fc_")
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert gateway.fake.requests[-1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}

    # Harnesses send arguments back re-serialized; they reach the engine as the client sent them.
    compact = json.dumps(json.loads(call.arguments), separators=(",", ":"))
    echoed = {**call.model_dump(exclude_none=True), "arguments": compact}
    final = await client.responses.create(
        model="policy",
        tools=[WEATHER_TOOL],
        input=[question, echoed, {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )

    assert final.output_text == "It is sunny in Paris."
    expected = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.call_id, "type": "function", "function": {"name": "get_weather", "arguments": compact}}
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
    ]
    assert gateway.fake.requests[-1]["messages"] == expected
    recorded = await recorded_calls(gateway, rollout["id"])
    assert [c["finish_reason"] for c in recorded] == ["tool_calls", "stop"]
    assert [c["dialect"] for c in recorded] == ["responses", "responses"]
    assert recorded[1]["prompt_ids"] == render_chat(expected)


async def test_output_cut_at_max_output_tokens_is_incomplete_and_still_completes_the_stream(gateway):
    gateway.fake.script = [FakeReply(content="Once upon", finish_reason="length")] * 2
    client = gateway.openai()
    response = await client.responses.create(model="policy", input="Tell a story.", max_output_tokens=3)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "Once upon"
    async with client.responses.stream(model="policy", input="Tell a story.", max_output_tokens=3) as stream:
        final = await stream.get_final_response()
    assert final.status == "incomplete" and final.output_text == "Once upon"


async def test_response_echoes_the_request_settings(gateway):
    response = await gateway.openai().responses.create(
        model="policy",
        input="Hi",
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        temperature=0.2,
        top_p=0.9,
        parallel_tool_calls=False,
        metadata={"k": "v"},
        store=False,
        max_output_tokens=32,
    )
    assert response.tools[0].name == "get_weather" and response.tool_choice == "auto"
    assert response.temperature == 0.2 and response.top_p == 0.9 and response.max_output_tokens == 32
    assert response.parallel_tool_calls is False and response.metadata == {"k": "v"}
    assert response.text.format.type == "text" and response.instructions is None


# --- rejected requests: OpenAI's error shape, nothing sent to the engine, nothing recorded ---


def assert_openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    return error


def body(**fields) -> dict:
    return {"model": "policy", "input": "Hi", **fields}


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"model": "policy"}, "input"),
        (body(input=7), "input"),
        (body(input=[]), "input must not be empty"),
        (body(input=""), "input must not be empty"),
        (body(input=["hi"]), "input.0"),
        (body(input=[{"role": "wizard", "content": "hi"}]), "role"),
        (body(input=[{"role": "user", "content": 7}]), "content"),
        (body(input=[{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]), "input_audio"),
        (body(input=[{"type": "web_search_call", "id": "ws_1"}]), "web_search_call"),
        (
            body(input=[{"type": "function_call_output", "call_id": "call_9", "output": "x"}]),
            "tool result without a call",
        ),
        (
            body(
                input=[
                    {"type": "function_call_output", "call_id": "call_9", "output": "x"},
                    {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{}"},
                ]
            ),
            "tool result without a call",
        ),
        (body(input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}]), "arguments"),
        (body(input=[{"type": "reasoning", "id": "rs_1", "summary": []}]), "input has no message"),
        (body(input=[{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]), "image_url"),
        # named by their path in the client's body (not pydantic's union branch, "tools.0.custom.name")
        (body(tools=[{"type": "namespace", "name": "agents", "tools": []}]), "tools.0.tools: List should"),
        (body(tools=[{"type": "custom"}]), "tools.0.name: Field required"),
        (body(tools=[{"type": "function"}]), "tools.0.name: Field required"),
        (body(reasoning={"effort": "extreme"}), "reasoning.effort"),
        (body(include="reasoning.encrypted_content"), "include"),
        (body(tool_choice="sometimes"), "tool_choice"),
        (body(temperature="hot"), "temperature"),
        (body(max_output_tokens=0), "max_output_tokens"),
        (body(text={"format": {"type": "grammar"}}), "text.format"),
        (body(previous_response_id="resp_1"), "previous_response_id is not supported; send the full input"),
    ],
)
async def test_bad_bodies_are_400_naming_the_field_and_record_nothing(gateway, bad, named):
    rollout = await gateway.new_rollout()
    error = assert_openai_error(await gateway.http.post(f"/r/{rollout['token']}/v1/responses", json=bad), 400)
    assert named in error["message"]
    assert error["type"] == "invalid_request_error"
    assert gateway.fake.requests == []
    assert await recorded_calls(gateway, rollout["id"]) == []


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{}", b"[1, 2]", b""])
async def test_unparsable_bodies_are_400(gateway, content):
    response = await gateway.http.post("/v1/responses", content=content, headers={"content-type": "application/json"})
    assert_openai_error(response, 400)
    assert gateway.fake.requests == []


async def test_huge_body_is_413_and_the_store_stays_usable(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_body_bytes=1000)
    async for gateway in start_gateway(settings, fake_engine):
        rollout = await gateway.new_rollout()
        path = f"/r/{rollout['token']}/v1/responses"
        assert_openai_error(await gateway.http.post(path, json=body(input="x" * 5000)), 413)
        assert (await gateway.http.post(path, json=body())).status_code == 200
        assert len(await recorded_calls(gateway, rollout["id"])) == 1


async def test_prompt_over_the_context_limit_is_400_and_records_nothing(gateway):
    rollout = await gateway.new_rollout()
    response = await gateway.http.post(f"/r/{rollout['token']}/v1/responses", json=body(input="y" * 3000))
    assert "2048" in assert_openai_error(response, 400)["message"]
    assert await recorded_calls(gateway, rollout["id"]) == []
