"""The Messages dialect at the level of the current API (what Claude Code sends), through the official SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest
from anthropic import AsyncAnthropic

from gateway.anthropic.context import CLEARED_RESULT
from tests.fake_tokens import FakeReply, render_chat

HI = [{"role": "user", "content": "Hi"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
BETAS = ["interleaved-thinking-2025-05-14", "context-management-2025-06-27", "effort-2025-11-24"]


@pytest.fixture
async def client(gateway) -> AsyncIterator[AsyncAnthropic]:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(gateway.app), base_url="http://gateway") as http:
        yield AsyncAnthropic(base_url="http://gateway", api_key="EMPTY", http_client=http, max_retries=0)


async def last_call(gateway) -> dict:
    calls = (await gateway.http.get("/api/calls", params={"limit": 1000})).json()["data"]
    return (await gateway.http.get(f"/api/calls/{max(c['id'] for c in calls)}")).json()


async def stored_request(gateway) -> dict:
    """The last recorded call's stored client body."""
    return (await last_call(gateway))["request"]


def thinking_turn(thought: str, text: str) -> dict:
    return {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": thought, "signature": ""}, {"type": "text", "text": text}],
    }


def tool_turn(call_id: str, name: str = "get_weather") -> list[dict]:
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": {"city": "X"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": f"sunny {call_id}"}]},
    ]


async def test_system_turn_inside_messages_is_rendered_where_it_occurs(gateway, client):
    environment = [{"type": "text", "text": "# Environment\ncwd: /workspace", "cache_control": {"type": "ephemeral"}}]
    await client.beta.messages.create(
        model="policy", max_tokens=16, betas=BETAS, messages=[*HI, {"role": "system", "content": environment}]
    )
    sent = gateway.fake.requests[-1]
    assert sent["messages"] == [*HI, {"role": "system", "content": "# Environment\ncwd: /workspace"}]
    detail = await last_call(gateway)
    assert detail["prompt_ids"] == render_chat(sent["messages"])


async def test_claude_code_options_are_accepted_mapped_and_unknown_fields_recorded(gateway, client):
    await client.beta.messages.create(
        model="policy",
        max_tokens=16,
        betas=BETAS,
        messages=HI,
        metadata={"user_id": "device-1"},
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        extra_body={
            "thinking": {"type": "adaptive", "display": "omitted"},
            "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "speed": "fast",
            "_gateway": {"left_out_tools": ["spoofed"]},
        },
    )
    sent = gateway.fake.requests[-1]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True, "reasoning_effort": "high"}
    stored = await stored_request(gateway)
    assert (
        stored["thinking"] == {"type": "adaptive", "display": "omitted"} and stored["metadata"]["user_id"] == "device-1"
    )
    # Unknown optional fields are kept and named; a client's own _gateway is replaced by the gateway's.
    assert stored["speed"] == "fast" and stored["_gateway"] == {"ignored_fields": ["speed"]}


async def test_clear_thinking_keeps_thinking_of_the_last_turns_only(gateway, client):
    history = [
        *HI,
        thinking_turn("first thought", "One."),
        {"role": "user", "content": "Again"},
        thinking_turn("second thought", "Two."),
        {"role": "user", "content": "Once more"},
    ]
    edit = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    await client.beta.messages.create(
        model="policy",
        max_tokens=16,
        messages=history,
        betas=BETAS,
        extra_body={"context_management": {"edits": [edit]}},
    )
    assistants = [m for m in gateway.fake.requests[-1]["messages"] if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in assistants] == [None, "second thought"]
    assert [m["content"] for m in assistants] == ["One.", "Two."]
    assert (await stored_request(gateway))["_gateway"] == {"context_edits": {"thinking_turns": 1}}


async def test_clear_thinking_by_default_keeps_one_turn_and_all_keeps_everything(gateway, client):
    history = [
        *HI,
        thinking_turn("a", "One."),
        {"role": "user", "content": "Again"},
        thinking_turn("b", "Two."),
        {"role": "user", "content": "More"},
    ]
    for keep, expected in ((None, [None, "b"]), ("all", ["a", "b"])):
        edit = {"type": "clear_thinking_20251015", **({"keep": keep} if keep else {})}
        await client.beta.messages.create(
            model="policy", max_tokens=16, messages=history, extra_body={"context_management": {"edits": [edit]}}
        )
        sent = gateway.fake.requests[-1]["messages"]
        assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == expected


async def test_clear_tool_uses_replaces_old_results_once_triggered(gateway, client):
    history = [*HI, *tool_turn("toolu_1"), *tool_turn("toolu_2", "read"), *tool_turn("toolu_3")]
    tools = [WEATHER, {**WEATHER, "name": "read"}]
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 3},
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": ["read"],
        "clear_tool_inputs": True,
    }
    await client.beta.messages.create(
        model="policy",
        max_tokens=16,
        messages=history,
        tools=tools,
        extra_body={"context_management": {"edits": [edit]}},
    )
    sent = gateway.fake.requests[-1]["messages"]
    results = [m["content"] for m in sent if m["role"] == "tool"]
    assert results == [CLEARED_RESULT, "sunny toolu_2", "sunny toolu_3"]  # the excluded tool and the last one kept
    calls = [m["tool_calls"][0]["function"]["arguments"] for m in sent if m.get("tool_calls")]
    assert calls == ["{}", '{"city": "X"}', '{"city": "X"}']
    assert (await stored_request(gateway))["_gateway"] == {"context_edits": {"tool_uses": 1}}


async def test_clear_tool_uses_waits_for_its_token_trigger(gateway, client):
    history = [*HI, *tool_turn("toolu_1"), *tool_turn("toolu_2")]
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 100_000},
        "keep": {"type": "tool_uses", "value": 0},
    }
    await client.beta.messages.create(
        model="policy",
        max_tokens=16,
        messages=history,
        tools=[WEATHER],
        extra_body={"context_management": {"edits": [edit]}},
    )
    assert CLEARED_RESULT not in str(gateway.fake.requests[-1]["messages"])
    low = {**edit, "trigger": {"type": "input_tokens", "value": 10}}
    await client.beta.messages.create(
        model="policy",
        max_tokens=16,
        messages=history,
        tools=[WEATHER],
        extra_body={"context_management": {"edits": [low]}},
    )
    assert [m["content"] for m in gateway.fake.requests[-1]["messages"] if m["role"] == "tool"] == [CLEARED_RESULT] * 2


async def test_server_and_deferred_tools_are_left_out_until_a_tool_reference_loads_them(gateway, client):
    deferred = {**WEATHER, "name": "WebFetch", "defer_loading": True}
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    tools = [WEATHER, deferred, search]
    await client.beta.messages.create(model="policy", max_tokens=16, messages=HI, tools=tools, betas=BETAS)
    assert [t["function"]["name"] for t in gateway.fake.requests[-1]["tools"]] == ["get_weather"]
    assert (await stored_request(gateway))["_gateway"] == {"left_out_tools": ["WebFetch", "web_search"]}

    loaded = [
        *HI,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s", "name": "get_weather", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_s",
                    "content": [{"type": "tool_reference", "tool_name": "WebFetch"}],
                }
            ],
        },
    ]
    await client.beta.messages.create(model="policy", max_tokens=16, messages=loaded, tools=tools, betas=BETAS)
    sent = gateway.fake.requests[-1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "WebFetch"]
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "toolu_s", "content": "Tool loaded: WebFetch"}
    assert (await stored_request(gateway))["_gateway"] == {"left_out_tools": ["web_search"]}


async def test_tool_use_answer_comes_back_for_a_conversation_ending_in_a_system_turn(gateway, client):
    gateway.fake.script = [FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),))]
    message = await client.beta.messages.create(
        model="policy",
        max_tokens=64,
        tools=[WEATHER],
        betas=BETAS,
        messages=[*HI, {"role": "system", "content": "Today is Monday."}],
    )
    assert message.stop_reason == "tool_use" and message.content[0].input == {"city": "Paris"}


async def test_count_tokens_applies_the_same_edits_and_system_turns(gateway):
    history = [
        *HI,
        thinking_turn("a long thought " * 20, "One."),
        {"role": "user", "content": "Again"},
        {"role": "system", "content": "reminder"},
    ]
    body = {"model": "policy", "messages": history}
    kept = (await gateway.http.post("/v1/messages/count_tokens", json=body)).json()["input_tokens"]
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}]}
    cleared = await gateway.http.post("/v1/messages/count_tokens", json={**body, "context_management": edits})
    assert cleared.status_code == 200, cleared.text
    assert 0 < cleared.json()["input_tokens"] <= kept


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"output_config": {"format": {"type": "regex"}}}, "output_config.format"),
        ({"thinking": {"type": "enabled"}}, "thinking"),
        ({"thinking": {"type": "adaptive", "display": "loud"}}, "thinking.display"),
        ({"context_management": {"edits": [{"type": "clear_everything"}]}}, "context_management.edits.0"),
        (
            {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": 2}]}},
            "context_management.edits.0.keep",
        ),
        (
            {"system": [{"type": "text", "text": "x", "cache_control": {"type": "forever"}}]},
            "system.0.cache_control.type",
        ),
        ({"metadata": {"user_id": 7}}, "metadata.user_id"),
        (
            {
                "context_management": {
                    "edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": -1}}]
                }
            },
            "context_management.edits.0.keep.value",
        ),
        ({"tools": [{"type": "web_search_20250305"}]}, "tools.0.name"),
        (
            {
                "messages": [
                    *HI,
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_reference"}]}
                        ],
                    },
                ]
            },
            "messages.1.content.0.content.0.tool_name",
        ),
    ],
)
async def test_malformed_current_api_values_are_400_in_anthropic_shape_and_record_nothing(gateway, extra, field):
    rollout = await gateway.new_rollout()
    body = {"model": "policy", "max_tokens": 16, "messages": HI, **extra}
    response = await gateway.http.post("/v1/messages", json=body, headers={"x-api-key": rollout["token"]})
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert field in error["error"]["message"], error
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert calls == []


async def test_an_agent_flooding_unknown_fields_gets_a_bounded_note(gateway):
    from gateway.request.notes import MAX_NAMED

    body = {"model": "policy", "max_tokens": 16, "messages": HI, **{f"x{n}": n for n in range(500)}}
    response = await gateway.http.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    stored = await stored_request(gateway)
    assert len(stored["_gateway"]["ignored_fields"]) == MAX_NAMED and stored["x0"] == 0
    # the first ones are kept as sent, up to a few KiB; the rest by name and size (gateway.request.unknown_fields)
    notes, left_out = stored["_gateway"], [n for n in range(500) if f"x{n}" not in stored]
    assert 499 in left_out and len(notes["omitted_fields"]) + notes["omitted_more"]["fields"] == len(left_out)
