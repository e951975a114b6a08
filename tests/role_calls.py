"""Token roles (issue 61): one agent conversation in each dialect, the records the gateway wrote for it,
and what their prompt roles must say.

The conversation has a system prompt, one tool, a user turn, the model's tool call, the tool's result
and a last call: its prompt holds every role. The texts are distinctive (newlines, non-ASCII) so that
the tokens marked TOOL or USER decode to exactly what the agent sent, or visibly not."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import numpy as np
from anthropic import AsyncAnthropic

from store.records import CallRecord, TokenRole
from tests.fake_tokens import FakeReply
from tests.gateway_harness import GatewayHarness

SYSTEM_TEXT = "You are a careful coding agent. Résumé: read before you write."
USER_TEXT = "Fix the failing test in naïve_math.py, please — it adds wrong."
TOOL_RESULT = 'def add(a, b):\n    return a - b  # ← bug\n\n§ 1 test failed: add(2, 2) == 0 ≠ 4\n\t"naïve" ✓'
FINAL = "Fixed: add returns a + b."
ARGUMENTS = {"path": "naïve_math.py"}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
RESPONSES_TOOL = {"type": "function", **CHAT_TOOL["function"]}
ANTHROPIC_TOOL = {
    "name": "read_file",
    "description": "Read a file.",
    "input_schema": CHAT_TOOL["function"]["parameters"],
}
DIALECTS = ("chat", "responses", "messages")


def script(gateway: GatewayHarness) -> None:
    """The model calls the tool, then answers."""
    gateway.fake.script = [FakeReply(tool_calls=(("read_file", ARGUMENTS),)), FakeReply(content=FINAL)]


def vllm_prompt(model_dir) -> Callable[[dict], list[int]]:
    """A chat body's prompt ids as vLLM renders them: transformers' chat template, tool-call arguments
    parsed into objects, function tools dumped as its pydantic models dump them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def render(body: dict) -> list[int]:
        messages = []
        for message in body["messages"]:
            calls = [
                {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"] or "{}")}}
                for c in message.get("tool_calls") or []
            ]
            messages.append({**message, "tool_calls": calls} if calls else message)
        tools = [
            {"type": "function", "function": {k: t["function"].get(k) for k in ("name", "description", "parameters")}}
            for t in body.get("tools") or []
        ]
        return list(
            tokenizer.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )

    return render


def recorded(gateway: GatewayHarness, monkeypatch) -> list[CallRecord]:
    """Every call record the gateway writes from now on (as handed to the store's writer)."""
    records: list[CallRecord] = []
    writer = gateway.state.writer
    original = writer.record

    async def record(call: CallRecord, **kwargs):
        records.append(call)
        return await original(call, **kwargs)

    monkeypatch.setattr(writer, "record", record)
    return records


async def converse(gateway: GatewayHarness, dialect: str, token: str, stream: bool = False) -> None:
    """The conversation in ``dialect``, as an agent sends it: the tool call echoed back re-serialized."""
    await {"chat": _chat, "responses": _responses, "messages": _messages}[dialect](gateway, token, stream)


async def _chat(gateway: GatewayHarness, token: str, stream: bool) -> None:
    client = gateway.openai(api_key=token)
    messages = [{"role": "system", "content": SYSTEM_TEXT}, {"role": "user", "content": USER_TEXT}]
    for _ in range(2):
        if stream:
            calls, content = await _streamed(
                await client.chat.completions.create(model="policy", messages=messages, tools=[CHAT_TOOL], stream=True)
            )
        else:
            reply = (await client.chat.completions.create(model="policy", messages=messages, tools=[CHAT_TOOL])).choices
            calls = [c.model_dump() for c in reply[0].message.tool_calls or []]
            content = reply[0].message.content or ""
        echoed = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["function"]["name"], "arguments": _compact(c["function"]["arguments"])},
            }
            for c in calls
        ]
        messages.append({"role": "assistant", "content": content or None, "tool_calls": echoed or None})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": TOOL_RESULT} for c in echoed]


async def _streamed(chunks) -> tuple[list[dict], str]:
    """A streamed answer's tool calls (their pieces put together) and content."""
    calls: dict[int, dict] = {}
    content = ""
    async for chunk in chunks:
        for delta in (c.delta for c in chunk.choices):
            content += delta.content or ""
            for piece in delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "function": {"name": "", "arguments": ""}})
                call["id"] += piece.id or ""
                call["function"]["name"] += (piece.function and piece.function.name) or ""
                call["function"]["arguments"] += (piece.function and piece.function.arguments) or ""
    return list(calls.values()), content


async def _responses(gateway: GatewayHarness, token: str, stream: bool) -> None:
    client = gateway.openai(api_key=token)
    items: list[dict] = [{"role": "user", "content": USER_TEXT}]
    for _ in range(2):
        response = await client.responses.create(
            model="policy", instructions=SYSTEM_TEXT, input=items, tools=[RESPONSES_TOOL]
        )
        for item in response.output:
            echoed = item.model_dump(exclude_none=True)
            if item.type == "function_call":
                echoed["arguments"] = _compact(item.arguments)
            items.append(echoed)
            if item.type == "function_call":
                items.append({"type": "function_call_output", "call_id": item.call_id, "output": TOOL_RESULT})


async def _messages(gateway: GatewayHarness, token: str, stream: bool) -> None:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(gateway.app), base_url="http://gateway") as http:
        client = AsyncAnthropic(base_url="http://gateway", api_key=token, http_client=http, max_retries=0)
        messages: list[dict] = [{"role": "user", "content": USER_TEXT}]
        for _ in range(2):
            reply = await client.messages.create(
                model="policy", max_tokens=256, system=SYSTEM_TEXT, messages=messages, tools=[ANTHROPIC_TOOL]
            )
            uses = [b for b in reply.content if b.type == "tool_use"]
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            if uses:
                results = [{"type": "tool_result", "tool_use_id": u.id, "content": TOOL_RESULT} for u in uses]
                messages.append({"role": "user", "content": results})


def _compact(arguments: str) -> str:
    return json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False)


def roles_of(record: CallRecord) -> np.ndarray:
    assert record.prompt_roles is not None, "the call's prompt roles are unknown"
    roles = np.frombuffer(record.prompt_roles, np.uint8)
    assert len(roles) == len(record.prompt_ids)
    return roles


def assert_roles_mark_the_conversation(record: CallRecord, decode: Callable[[list[int]], str]) -> None:
    """The last call's prompt: every token has a role, and each role's tokens are what they should be."""
    roles, ids = roles_of(record), np.asarray(record.prompt_ids)
    assert TokenRole.UNKNOWN not in roles
    assert set(roles.tolist()) == {r for r in TokenRole if r != TokenRole.UNKNOWN}

    def text(role: TokenRole) -> str:
        return decode(ids[roles == role].tolist())

    assert text(TokenRole.TOOL) == TOOL_RESULT
    assert text(TokenRole.USER) == USER_TEXT
    assert text(TokenRole.SYSTEM).startswith(SYSTEM_TEXT) and '"read_file"' in text(TokenRole.SYSTEM)
    assert "<tool_call>" in text(TokenRole.ASSISTANT) and "read_file" in text(TokenRole.ASSISTANT)
    assert "<|im_start|>" in text(TokenRole.TEMPLATE) and SYSTEM_TEXT not in text(TokenRole.TEMPLATE)
