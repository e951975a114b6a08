"""Stream-through on the fake engine: a streamed call records exactly what the same call unstreamed
records, and it is committed before its stream's last event leaves."""

from __future__ import annotations

import httpx
import pytest

from gateway.app import create_app
from harnessrl.server import BackgroundServer
from tests.builders import ADMIN_HEADERS, WEATHER_TOOL, chat_body, gateway_settings, messages_body
from tests.fake_tokens import FakeReply
from tests.streams import CALL_ID_COMMENT

ANTHROPIC_WEATHER = {
    "name": "get_weather",
    "description": "Weather.",
    "input_schema": WEATHER_TOOL["function"]["parameters"],
}
BODIES = {
    "chat": ("/v1/chat/completions", chat_body("Weather in Paris?", tools=[WEATHER_TOOL])),
    "responses": (
        "/v1/responses",
        {"model": "policy", "input": "Weather in Paris?", "tools": [{"type": "function", **WEATHER_TOOL["function"]}]},
    ),
    "messages": ("/v1/messages", messages_body("Weather in Paris?", tools=[ANTHROPIC_WEATHER], max_tokens=64)),
}
REPLY = FakeReply(
    reasoning="They ask for weather.", content="Checking.", tool_calls=(("get_weather", {"city": "Paris"}),)
)


@pytest.mark.parametrize("dialect", sorted(BODIES))
async def test_a_streamed_call_records_what_the_same_call_unstreamed_records(gateway, dialect):
    gateway.fake.script = [REPLY, REPLY]
    rollout = await gateway.new_rollout()
    path, body = BODIES[dialect]
    auth = {"authorization": f"Bearer {rollout['token']}"}
    for stream in (False, True):
        response = await gateway.agent.post(path, json={**body, "stream": stream}, headers=auth)
        assert response.status_code == 200, response.text
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    plain, streamed = calls
    for field in ("prompt_ids", "output_ids", "output_logprobs", "finish_reason", "dialect"):
        assert streamed[field] == plain[field], field
    assert streamed["tags"] == plain["tags"] == []
    details = [
        (await gateway.http.get(f"/api/calls/{c['id']}")).json()["response"]["choices"][0]["message"] for c in calls
    ]
    for message in details:
        message["tool_calls"] = [{**c, "id": None} for c in message.get("tool_calls") or ()]  # ids are per call
        message["reasoning"] = message.get("reasoning") or message.pop("reasoning_content", None)
    assert details[1]["content"] == details[0]["content"] == "Checking."
    assert details[1]["tool_calls"] == details[0]["tool_calls"]
    assert details[1]["reasoning"] == details[0]["reasoning"] == "They ask for weather."


@pytest.fixture
def served_gateway(sqlite_db, fake_engine, fake_engine_server):
    with BackgroundServer(create_app(gateway_settings(sqlite_db, fake_engine_server.url))) as server:
        yield server


@pytest.mark.parametrize("dialect", sorted(BODIES))
async def test_a_streamed_call_is_committed_before_its_last_event(served_gateway, fake_engine, dialect):
    path, body = BODIES[dialect]
    seen_before_the_end = None
    async with httpx.AsyncClient(base_url=served_gateway.url, headers=ADMIN_HEADERS, timeout=60) as http:
        async with http.stream("POST", path, json={**body, "stream": True}) as response:
            lines = []
            async for line in response.aiter_lines():
                if (found := CALL_ID_COMMENT.match(line)) and seen_before_the_end is None:
                    # The client holds everything but the last events: the call is already in the store.
                    call = await http.get(f"/api/calls/{found.group(1)}")
                    seen_before_the_end = (call.status_code, len(call.json().get("output_ids") or ()))
                lines.append(line)
    tail = [line for line in lines if line.startswith(("data:", "event:"))][-1]
    assert seen_before_the_end is not None and seen_before_the_end[0] == 200
    assert seen_before_the_end[1] == len("Hello from the fake engine.") + 1  # every sampled id, the end token too
    assert tail.endswith(("[DONE]", "}"))  # and the last event still came after it
