"""The compatibility record: every harness's real first request, replayed through each capture mode.

The fixtures (tests/fixtures/first_requests/, see tests/first_requests.py) are what the pinned agent
binaries sent. Each must be served (200, in the form it asked for) and recorded under its rollout in
both capture modes, with the gateway noting exactly what it did not serve. A new agent release whose
first request adds a field or a tool type then fails here when its fixture is refreshed, not in a
user's run.
"""

from __future__ import annotations

import json

import pytest

from store.capture_modes import CAPTURE_MODES
from tests.first_requests import HARNESSES, load_first_request

MODES = CAPTURE_MODES  # every mode replays every agent's first request


@pytest.fixture
def any_gateway(request):
    """The in-process gateway for the capture mode (tito: the fake engine speaks the tiny model's tokens)."""
    return request.getfixturevalue({"engine": "gateway", "tito": "tito_gateway"}[request.param])


def headers_for(fixture: dict, token: str) -> dict:
    return {**fixture["headers"], "authorization": f"Bearer {token}", "x-api-key": token}


def streamed_events(text: str) -> list[str]:
    return [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]


def assert_complete_answer(fixture: dict, response) -> None:
    """The answer in the shape the agent asked for, ending the way its client requires."""
    body = fixture["body"]
    if not body.get("stream"):
        payload = response.json()
        assert payload.get("choices") or payload.get("content") is not None or payload.get("output") is not None
        return
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(e) for e in streamed_events(response.text) if e != "[DONE]"]
    kinds = [e.get("type") for e in events]
    if fixture["dialect"] == "messages":
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    elif fixture["dialect"] == "responses":
        assert kinds[-1] == "response.completed"  # Codex fails a stream without it
    else:
        assert events and response.text.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("name", HARNESSES)
def test_fixture_is_the_pinned_agents_first_main_loop_request(name):
    from harnesses.agents import AGENTS

    fixture = load_first_request(name)
    module = __import__(AGENTS[name].__module__, fromlist=["VERSION"])
    assert fixture["version"] == module.VERSION, f"refresh the fixture: .venv/bin/python -m tests.first_requests {name}"
    assert fixture["body"]["tools"], "the first main-loop request offers the agent's tools"
    # Everything the pinned agents send is understood: nothing is accepted unread.
    assert fixture["notes"].get("ignored_fields", []) == []


@pytest.mark.parametrize("any_gateway", MODES, indirect=True)
@pytest.mark.parametrize("name", HARNESSES)
async def test_first_request_is_served_and_recorded_in_each_capture_mode(name, any_gateway, request):
    mode = request.node.callspec.params["any_gateway"]
    gateway, fixture = any_gateway, load_first_request(name)
    gateway.fake.max_model_len = 1_000_000  # real agents' prompts are 6-60 kB; asks for up to 64K tokens
    rollout = await gateway.new_rollout(run=f"compat-{mode}", task=name, capture=mode)
    response = await gateway.agent.post(
        fixture["path"].replace("/v1/", f"/r/{rollout['token']}/v1/", 1),
        json=fixture["body"],
        headers=headers_for(fixture, rollout["token"]),
    )
    assert response.status_code == 200, response.text[:2000]
    assert_complete_answer(fixture, response)

    [call] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    detail = (await gateway.http.get(f"/api/calls/{call['id']}")).json()
    assert detail["dialect"] == fixture["dialect"] and len(detail["prompt_ids"]) > 500
    assert len(detail["output_ids"]) == len(detail["output_logprobs"]) > 0
    stored = dict(detail["request"])
    assert stored.pop("_gateway", {}) == fixture["notes"]
    assert stored == fixture["body"]  # the rest verbatim
