"""The Responses dialect at the level of the current API (what Codex CLI sends), through the official SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from gateway.request.notes import ignored_fields
from gateway.responses import reasoning
from tests.fake_tokens import FakeReply

EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a command.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}
SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Start a subagent.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Subagents.", "tools": [SPAWN]}
PATCH_GRAMMAR = 'start: "*** Begin Patch" LF body "*** End Patch"'
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
WEB_SEARCH = {"type": "web_search", "external_web_access": True}
CODEX_TOOLS = [EXEC, AGENTS, APPLY_PATCH, WEB_SEARCH]
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch"


async def last_call(gateway) -> dict:
    calls = (await gateway.http.get("/api/calls", params={"limit": 1000})).json()["data"]
    return (await gateway.http.get(f"/api/calls/{max(c['id'] for c in calls)}")).json()


def add_reasoning(gateway, monkeypatch, text: str) -> None:
    """The engine's answer carries reasoning (the fake engine writes none itself)."""
    engine = gateway.app.state.gateway.engine
    original = engine.chat

    async def chat(body: dict) -> dict:
        answer = await original(body)
        answer["choices"][0]["message"]["reasoning_content"] = text
        return answer

    monkeypatch.setattr(engine, "chat", chat)


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def test_codex_tools_offer_functions_namespaced_and_custom_and_leave_hosted_ones_out(gateway):
    await gateway.openai().responses.create(model="policy", input=[user("Hi")], tools=CODEX_TOOLS)
    offered = {t["function"]["name"]: t["function"] for t in gateway.fake.requests[-1]["tools"]}
    assert list(offered) == ["exec_command", "spawn_agent", "apply_patch"]
    assert offered["apply_patch"]["parameters"] == {
        "type": "object",
        "properties": {"input": {"type": "string"}},
        "required": ["input"],
    }
    assert PATCH_GRAMMAR in offered["apply_patch"]["description"]
    stored = (await last_call(gateway))["request"]
    assert stored["tools"] == CODEX_TOOLS and stored["_gateway"] == {"left_out_tools": ["web_search"]}


async def test_a_namespaced_call_names_its_namespace_and_a_custom_call_carries_its_string_input(gateway):
    gateway.fake.script = [
        FakeReply(tool_calls=(("spawn_agent", {"message": "look"}), ("apply_patch", {"input": PATCH})))
    ]
    response = await gateway.openai().responses.create(model="policy", input=[user("Hi")], tools=CODEX_TOOLS)
    spawn, patch = response.output
    assert (spawn.type, spawn.name, json.loads(spawn.arguments)) == (
        "function_call",
        "spawn_agent",
        {"message": "look"},
    )
    assert spawn.model_dump()["namespace"] == "multi_agent_v1"
    assert (patch.type, patch.name, patch.input) == ("custom_tool_call", "apply_patch", PATCH)

    # Both come back next turn, with their outputs, as the same chat tool calls.
    history = [
        user("Hi"),
        {
            "type": "function_call",
            "call_id": spawn.call_id,
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": spawn.arguments,
        },
        {"type": "function_call_output", "call_id": spawn.call_id, "output": "agent 1 started"},
        {"type": "custom_tool_call", "call_id": patch.call_id, "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": patch.call_id, "output": "Done!"},
    ]
    await gateway.openai().responses.create(model="policy", input=history, tools=CODEX_TOOLS)
    sent = gateway.fake.requests[-1]["messages"]
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for m in sent for c in m.get("tool_calls") or []
    ]
    assert calls == [("spawn_agent", {"message": "look"}), ("apply_patch", {"input": PATCH})]
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["agent 1 started", "Done!"]


async def test_namespaced_function_that_collides_is_offered_under_a_qualified_name(gateway):
    plain_spawn = {**SPAWN, "description": "Another spawn."}
    gateway.fake.script = [FakeReply(tool_calls=(("multi_agent_v1__spawn_agent", {}),))]
    response = await gateway.openai().responses.create(model="policy", input="Hi", tools=[plain_spawn, AGENTS])
    assert [t["function"]["name"] for t in gateway.fake.requests[-1]["tools"]] == [
        "spawn_agent",
        "multi_agent_v1__spawn_agent",
    ]
    [call] = response.output
    assert call.name == "spawn_agent" and call.model_dump()["namespace"] == "multi_agent_v1"


async def test_encrypted_reasoning_names_the_call_and_brings_its_reasoning_back(gateway, monkeypatch):
    add_reasoning(gateway, monkeypatch, "I should greet.")
    response = await gateway.openai().responses.create(
        model="policy",
        input=[user("Hi")],
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"summary": "auto", "effort": "high"},
    )
    thought = response.output[0]
    assert thought.type == "reasoning" and thought.encrypted_content.startswith(reasoning.PREFIX)
    call = await last_call(gateway)
    assert reasoning.decode(thought.encrypted_content) == reasoning.ReasoningRef(call["id"], "I should greet.")
    assert gateway.fake.requests[-1]["chat_template_kwargs"] == {"reasoning_effort": "high"}

    # Codex sends it back without the id or the text: only the opaque value and an empty summary.
    echoed = {"type": "reasoning", "summary": [], "encrypted_content": thought.encrypted_content}
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": response.output_text}],
    }
    await gateway.openai().responses.create(
        model="policy",
        input=[user("Hi"), echoed, answer, user("Again")],
        store=False,
        include=["reasoning.encrypted_content"],
    )
    assistant = next(m for m in gateway.fake.requests[-1]["messages"] if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "I should greet."


async def test_reasoning_without_include_has_no_encrypted_content(gateway, monkeypatch):
    add_reasoning(gateway, monkeypatch, "Thinking.")
    response = await gateway.openai().responses.create(model="policy", input="Hi")
    assert response.output[0].type == "reasoning" and response.output[0].encrypted_content is None


@pytest.mark.parametrize(
    "value",
    [
        "gAAAAABforeign-server-value",
        reasoning.PREFIX + "!!!not base64",
        reasoning.PREFIX + "WyJhIl0=",
        reasoning.PREFIX + "eyJjYWxsIjogdHJ1ZSwgInRleHQiOiAxfQ==",
    ],
)
async def test_foreign_or_forged_encrypted_content_falls_back_to_the_summary(gateway, value):
    echoed = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "summary"}], "encrypted_content": value}
    answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]}
    response = await gateway.http.post(
        "/v1/responses", json={"model": "policy", "input": [user("Hi"), echoed, answer, user("Again")]}
    )
    assert response.status_code == 200, response.text
    assistant = next(m for m in gateway.fake.requests[-1]["messages"] if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "summary"


async def test_codex_request_fields_are_accepted_and_recorded(gateway):
    rollout = await gateway.new_rollout()
    body = {
        "model": "policy",
        "stream": False,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "client_metadata": {"session_id": "s1", "turn_id": "t1"},
        "tools": [EXEC, WEB_SEARCH],
        "text": {"verbosity": "low"},
        "future_option": {"a": 1},
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be safe."}]},
            user("Hi"),
        ],
    }
    response = await gateway.http.post(f"/r/{rollout['token']}/v1/responses", json=body)
    assert response.status_code == 200, response.text
    sent = gateway.fake.requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["developer", "user"] and sent["parallel_tool_calls"] is True
    stored = (await last_call(gateway))["request"]
    assert stored["client_metadata"] == body["client_metadata"] and stored["prompt_cache_key"] == "thread-1"
    assert stored["_gateway"] == {"ignored_fields": ["future_option"], "left_out_tools": ["web_search"]}
    assert response.json()["tools"] == [EXEC, WEB_SEARCH]


@pytest.mark.parametrize(
    ("tools", "named"),
    [
        ([{"type": "custom", "name": "apply_patch", "format": "lark"}], "format"),
        ([{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}], "tools.0.tools.0: Input tag"),
        ([{"type": 7}], "type"),
    ],
)
async def test_malformed_tools_are_400_and_record_nothing(gateway, tools, named):
    rollout = await gateway.new_rollout()
    response = await gateway.http.post(
        f"/r/{rollout['token']}/v1/responses", json={"model": "policy", "input": "Hi", "tools": tools}
    )
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]["message"]
    assert (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"] == []


async def test_streamed_custom_and_namespaced_calls_arrive_in_the_clients_shape(gateway):
    """Codex always streams: its items are read from output_item.done and response.completed."""
    gateway.fake.script = [
        FakeReply(tool_calls=(("spawn_agent", {"message": "look"}), ("apply_patch", {"input": PATCH})))
    ]
    stream = await gateway.openai().responses.create(model="policy", input=[user("Hi")], tools=CODEX_TOOLS, stream=True)
    events = [event async for event in stream]
    done = [e.item.model_dump() for e in events if e.type == "response.output_item.done"]
    assert [(i["type"], i["name"]) for i in done] == [
        ("function_call", "spawn_agent"),
        ("custom_tool_call", "apply_patch"),
    ]
    assert done[0]["namespace"] == "multi_agent_v1" and done[1]["input"] == PATCH
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [i.type for i in completed.response.output] == ["function_call", "custom_tool_call"]


async def test_a_streamed_custom_tool_calls_input_arrives_in_pieces_as_sampled(gateway):
    """Codex shows apply_patch being written: its input streams as custom_tool_call_input deltas."""
    patch = PATCH + '\n"quoted" \\ tab\t é 😀'
    gateway.fake.script = [
        FakeReply(
            content="Patching.", tool_calls=(("spawn_agent", {"message": "look"}), ("apply_patch", {"input": patch}))
        )
    ]
    async with gateway.openai().responses.stream(model="policy", input=[user("Hi")], tools=CODEX_TOOLS) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert len(deltas) >= 2 and "".join(deltas) == patch  # the fake engine sends the arguments in halves
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert done.input == patch
    arguments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert json.loads("".join(arguments)) == {"message": "look"} and len(arguments) >= 2
    assert [i.type for i in final.output] == ["message", "function_call", "custom_tool_call"]
    assert final.output[2].input == patch and final.output[2].name == "apply_patch"
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1, 2] and done.output_index == 2


def test_a_list_mixing_models_and_plain_objects_is_walked_without_error():
    """Found by the fuzzer: a list whose first item is a list and a later one a dict made the walk index
    the dict (a 500 on /v1/responses)."""

    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        items: list[Any]

    class Outer(BaseModel):
        model_config = ConfigDict(extra="allow")
        parts: list[Loose]

    parsed = Outer(parts=[Loose(items=[[1], {"a": 1}], unknown=True)], other=1)
    assert ignored_fields(parsed) == ["other", "parts.*.unknown"]
