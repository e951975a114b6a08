"""The OpenAI dialect through the official SDK, against the fake engine, recorded in SQLite."""

from __future__ import annotations

import json

import pytest

from tests.builders import WEATHER_TOOL, chat_body
from tests.fake_tokens import FakeReply, decode, encode, logprob_at, render_chat
from tests.streams import merged_tool_calls


async def recorded_calls(gateway, rollout_id: int) -> list[dict]:
    response = await gateway.http.get(f"/api/rollouts/{rollout_id}/calls")
    assert response.status_code == 200
    return response.json()["data"]


async def test_chat_call_records_exact_prompt_and_sampled_tokens(gateway):
    rollout = await gateway.new_rollout()
    client = gateway.openai(rollout["base_url"].replace("http://testserver", "http://gateway"))
    completion = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}])

    assert completion.choices[0].message.content == "Hello from the fake engine."
    assert completion.model == "policy"
    [call] = await recorded_calls(gateway, rollout["id"])
    assert call["prompt_ids"] == render_chat([{"role": "user", "content": "Hi"}])
    assert decode(call["output_ids"][:-1]) == "Hello from the fake engine."
    assert len(call["output_ids"]) == completion.usage.completion_tokens
    assert call["output_logprobs"] == pytest.approx([logprob_at(n) for n in range(len(call["output_ids"]))])
    assert call["finish_reason"] == "stop" and call["policy_version"] == 0


async def test_engine_is_asked_for_token_ids_and_logprobs_streaming_as_the_client_does(gateway):
    client = gateway.openai()
    for stream in (True, False):
        await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "x"}],
            stream=stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
        )
        sent = gateway.fake.requests[-1]
        assert sent["stream"] is stream and sent["return_token_ids"] is True and sent["logprobs"] is True
        assert sent.get("stream_options") == ({"include_usage": True} if stream else None)
        assert sent["model"] == "fake-base"


async def test_logprobs_and_token_ids_are_not_returned_unless_asked(gateway):
    plain = (await gateway.http.post("/v1/chat/completions", json=chat_body())).json()
    assert plain["choices"][0]["logprobs"] is None
    assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain
    asked = (await gateway.http.post("/v1/chat/completions", json=chat_body(logprobs=True))).json()
    assert len(asked["choices"][0]["logprobs"]["content"]) == asked["usage"]["completion_tokens"]


async def test_streaming_replay_parses_with_the_sdk_and_carries_usage(gateway):
    client = gateway.openai()
    stream = await client.chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the fake engine."
    assert chunks[-1].usage.completion_tokens == len(encode(text)) + 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


async def test_streamed_tool_call_round_trip(gateway):
    gateway.fake.script = [
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="It is sunny in Paris."),
    ]
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    stream = await client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL], stream=True)
    calls = merged_tool_calls([c async for c in stream])
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
    messages += [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": calls[0]["id"],
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": calls[0]["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny"},
    ]
    final = await client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])
    assert final.choices[0].message.content == "It is sunny in Paris."
    recorded = await recorded_calls(gateway, rollout["id"])
    assert [c["finish_reason"] for c in recorded] == ["tool_calls", "stop"]


async def test_legacy_completions_with_token_prompt_and_stream(gateway):
    client = gateway.openai()
    completion = await client.completions.create(model="policy", prompt=[5, 6, 7], max_tokens=8)
    assert completion.choices[0].text == "Hello from the fake engine."
    stream = await client.completions.create(
        model="policy", prompt="abc", stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    assert chunks[-1].usage.prompt_tokens == 3
    assert gateway.fake.requests[0]["prompt"] == [5, 6, 7]


async def test_calls_without_token_go_to_the_adhoc_run(gateway):
    await gateway.http.post("/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer EMPTY"})
    runs = (await gateway.http.get("/api/runs")).json()["data"]
    assert [r["name"] for r in runs] == ["adhoc"]


async def test_token_in_header_or_path_selects_the_rollout(gateway):
    first, second = await gateway.new_rollout(task="a"), await gateway.new_rollout(task="b")
    await gateway.http.post("/v1/chat/completions", json=chat_body(), headers={"x-api-key": first["token"]})
    await gateway.http.post(f"/r/{second['token']}/v1/chat/completions", json=chat_body())
    await gateway.http.post(
        "/v1/chat/completions", json=chat_body(), headers={"authorization": f"Bearer {second['token']}"}
    )
    assert len(await recorded_calls(gateway, first["id"])) == 1
    assert len(await recorded_calls(gateway, second["id"])) == 2


async def test_models_lists_the_public_name(gateway):
    models = await gateway.openai().models.list()
    assert [m.id for m in models.data] == ["policy"]
