"""tito capture streams through: token prompts to the engine's completions stream, the sampled text
parsed as it arrives (reasoning, content, Hermes tool calls) and sent in the client's dialect, the call
recorded as the same call unstreamed records it. The gateway's own Completions route streams through
too. A client that leaves mid-stream cancels the engine request and leaves an ``undelivered`` call."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from gateway.app import create_app
from gateway.tito.parser import StreamParser, parse_output
from harnessrl.server import BackgroundServer
from tests.builders import ADMIN_HEADERS, WEATHER_TOOL, chat_body, gateway_settings
from tests.fake_tokens import FakeReply
from tests.unit.test_stream_through import BODIES
from tests.unit.test_undelivered import calls_of, read_then_hang_up
from tests.waiting import until

SAMPLED = (
    "<think>They ask for weather.</think>Checking the weather now.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
LONG_ANSWER = "Hello there, this answer is long enough to leave in the middle."
TEXTS = [
    "Hello world",
    "  <think> let me think \n</think>\nAnswer <tool",
    SAMPLED,
    "x <tool_cal",
    "",
    "<thin",
    " <",
    'A<tool_call>{"name":"f","arguments":{}}</tool_call>\n<tool_call>{"name":"g","arguments":"x"}</tool_call>tail',
    "A<tool_call>{bad</tool_call> rest",
    'A<tool_call>{"name":"f","arguments":{}}',
    "<think>a</think>",
]


def streamed_parse(text: str, tools: bool, rng: random.Random) -> tuple:
    parser, deltas, at = StreamParser(tools), [], 0
    while at < len(text):
        size = rng.randint(1, 6)
        deltas += parser.feed(text[at : at + size])
        at += size
    deltas += parser.finish()
    content = "".join(d["content"] for d in deltas if "content" in d) or None
    reasoning = "".join(d["reasoning"] for d in deltas if "reasoning" in d) or None
    return content, reasoning, [d["tool_call"]["function"] for d in deltas if "tool_call" in d]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("tools", [True, False])
def test_text_parsed_piece_by_piece_reads_as_the_whole_text_parsed(text, tools):
    whole = parse_output(text, tools)
    rng = random.Random(text)
    for _ in range(40):
        assert streamed_parse(text, tools, rng) == (
            whole.content or None,
            whole.reasoning or None,
            [c["function"] for c in whole.tool_calls],
        )


def test_a_tool_call_is_parsed_as_soon_as_it_closes():
    parser = StreamParser(tools_enabled=True)
    assert parser.feed("Checking.<tool_") == [{"content": "Checking."}]  # "<tool_" may open a call
    [call] = parser.feed('call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    assert call["tool_call"]["function"] == {"name": "f", "arguments": '{"a": 1}'}


@pytest.mark.parametrize("dialect", sorted(BODIES))
async def test_a_tito_stream_records_what_the_same_call_unstreamed_records(tito_gateway, dialect):
    tito_gateway.fake.script = [FakeReply(raw_text=SAMPLED), FakeReply(raw_text=SAMPLED)]
    rollout = await tito_gateway.new_rollout(capture="tito")
    path, body = BODIES[dialect]
    auth = {"authorization": f"Bearer {rollout['token']}"}
    for stream in (False, True):
        response = await tito_gateway.agent.post(path, json={**body, "stream": stream}, headers=auth)
        assert response.status_code == 200, response.text
    assert [r.get("stream") for r in tito_gateway.fake.requests] == [False, True]  # streamed from the engine
    plain, streamed = (await tito_gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    for field in ("prompt_ids", "output_ids", "output_logprobs", "finish_reason", "dialect"):
        assert streamed[field] == plain[field], field
    assert streamed["finish_reason"] == "tool_calls" and streamed["tags"] == []
    messages = []
    for call in (plain, streamed):
        detail = (await tito_gateway.http.get(f"/api/calls/{call['id']}")).json()
        message = detail["response"]["choices"][0]["message"]
        messages.append(
            (
                message["content"],
                message.get("reasoning") or message.get("reasoning_content"),
                [c["function"] for c in message["tool_calls"]],
            )
        )
    assert (
        messages[1]
        == messages[0]
        == (
            "Checking the weather now.\n",
            "They ask for weather.",
            [{"name": "get_weather", "arguments": '{"city": "Paris"}'}],
        )
    )


async def test_a_tito_stream_arrives_in_pieces_and_its_tool_call_parses_in_the_sdk(tito_gateway):
    tito_gateway.fake.script = [FakeReply(raw_text=SAMPLED)]
    rollout = await tito_gateway.new_rollout(capture="tito")
    client = tito_gateway.openai(api_key=rollout["token"])
    async with client.chat.completions.stream(
        model="policy", messages=[{"role": "user", "content": "Paris?"}], tools=[WEATHER_TOOL]
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_completion()
    assert kinds.count("content.delta") >= 3  # as sampled, token by token; a replay sends one delta
    [call] = final.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.choices[0].message.content == "Checking the weather now.\n"


async def test_the_completions_route_streams_through_and_records_what_unstreamed_records(gateway):
    gateway.fake.script = [FakeReply(content="One two three."), FakeReply(content="One two three.")]
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    plain = await client.completions.create(model="policy", prompt="Count:", max_tokens=16, logprobs=0)
    chunks = [
        chunk
        async for chunk in await client.completions.create(
            model="policy",
            prompt="Count:",
            max_tokens=16,
            logprobs=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    ]
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert len(texts) >= 3 and "".join(texts) == plain.choices[0].text
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert gateway.fake.requests[-1]["stream"] is True
    first, second = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    for field in ("prompt_ids", "output_ids", "output_logprobs", "finish_reason", "dialect"):
        assert second[field] == first[field], field
    assert second["dialect"] == "completions" and second["tags"] == []


@pytest.fixture
def served_tito_gateway(sqlite_db, fake_engine, fake_engine_server, tiny_model_dir, model_text):
    fake_engine.encode_text, fake_engine.decode_ids = model_text.encode, model_text.decode
    settings = gateway_settings(sqlite_db, fake_engine_server.url, require_token=True, model_dir=str(tiny_model_dir))
    with BackgroundServer(create_app(settings)) as server:
        yield server


async def test_a_tito_stream_whose_client_leaves_cancels_the_engine_and_records_the_part_sent(
    served_tito_gateway, fake_engine, model_text
):
    fake_engine.token_delay_s = 0.25  # the client leaves seconds before the end, even on a busy machine
    fake_engine.script = [FakeReply(raw_text=LONG_ANSWER)]
    async with httpx.AsyncClient(base_url=served_tito_gateway.url, headers=ADMIN_HEADERS, timeout=60) as http:
        rollout = (await http.post("/api/rollouts", json={"run": "r", "task": "t", "capture": "tito"})).json()
        path = f"/r/{rollout['token']}/v1/chat/completions"
        received = await asyncio.to_thread(
            read_then_hang_up, served_tito_gateway.url, path, chat_body("first", stream=True), b"Hello"
        )
        assert b"[DONE]" not in received
        [call] = await calls_of(http, rollout["id"], 1, tagged_from=0)
        await until(lambda: fake_engine.streams_aborted, "the engine stream to be aborted")
        assert call["tags"] == ["undelivered"]
        detail = (await http.get(f"/api/calls/{call['id']}")).json()
        sampled = model_text.encode(LONG_ANSWER)
        assert 1 <= len(detail["output_ids"]) < len(sampled)
        assert detail["output_ids"] == sampled[: len(detail["output_ids"])]
        assert len(detail["output_logprobs"]) == len(detail["output_ids"])
        assert fake_engine.streams_aborted == 1  # the engine request was cancelled, not run to its end
        assert fake_engine.requests[-1]["stream"] is True and isinstance(fake_engine.requests[-1]["prompt"], list)
