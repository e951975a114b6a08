"""tito capture for the Anthropic Messages and OpenAI Responses dialects, driven by the official SDKs:
agents that echo their tool calls back (re-serialized, as content blocks or function_call items)
still make one sample with no forks, whose ids are what the engine was sent and sampled."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx2
import pytest
from anthropic import AsyncAnthropic

from tests.fake_tokens import FakeReply
from tests.gateway_harness import GatewayHarness

TURNS = 6
ANTHROPIC_TOOL = {
    "name": "read_file",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def script(gateway: GatewayHarness) -> None:
    # Odd spacing inside the sampled arguments: the agent's echo never matches them byte for byte.
    gateway.fake.script = [
        FakeReply(
            raw_text=f'Reading.\n<tool_call>\n{{"name": "read_file", "arguments": {{"path":   "f{n}.py"}}}}\n</tool_call>'
        )
        for n in range(TURNS - 1)
    ] + [FakeReply(content="Done: the bug is fixed.")]


async def assert_one_sample_without_forks(gateway: GatewayHarness, rollout_id: int, dialect: str) -> None:
    http = gateway.http
    view = (await http.get(f"/api/rollouts/{rollout_id}")).json()
    assert view["graph"] == {"calls": TURNS, "roots": 1, "forks": 0, "drift_tokens": 0}
    calls = (await http.get(f"/api/rollouts/{rollout_id}/calls")).json()["data"]
    assert {c["dialect"] for c in calls} == {dialect}
    [sample] = (await http.get(f"/api/rollouts/{rollout_id}/samples")).json()["data"]
    assert sample["input_ids"] == calls[-1]["prompt_ids"] + calls[-1]["output_ids"]
    sent = [body["prompt"] for body in gateway.fake.requests[-TURNS:]]
    assert sent == [c["prompt_ids"] for c in calls]  # what the engine was sent, exactly
    for earlier, later, call in zip(sent, sent[1:], calls):
        assert later[: len(earlier) + len(call["output_ids"])] == earlier + call["output_ids"]
    assert sum(sample["loss_mask"]) == sum(len(c["output_ids"]) for c in calls)


@pytest.fixture
async def anthropic_http(tito_gateway) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(tito_gateway.app), base_url="http://gateway") as http:
        yield http


async def test_anthropic_tool_turns_in_tito_make_one_sample_without_forks(tito_gateway, anthropic_http):
    script(tito_gateway)
    rollout = await tito_gateway.new_rollout(run="tito-anthropic", capture="tito")
    client = AsyncAnthropic(
        base_url="http://gateway", api_key=rollout["token"], http_client=anthropic_http, max_retries=0
    )
    messages: list[dict] = [{"role": "user", "content": "Fix the bug."}]
    for _ in range(TURNS):
        reply = await client.messages.create(model="policy", max_tokens=256, messages=messages, tools=[ANTHROPIC_TOOL])
        uses = [b for b in reply.content if b.type == "tool_use"]
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if uses:
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "x = 1\n"} for u in uses],
                }
            )
    assert reply.stop_reason == "end_turn" and reply.content[0].text == "Done: the bug is fixed."
    await assert_one_sample_without_forks(tito_gateway, rollout["id"], "messages")


async def test_responses_tool_turns_in_tito_make_one_sample_without_forks(tito_gateway):
    script(tito_gateway)
    rollout = await tito_gateway.new_rollout(run="tito-responses", capture="tito")
    client = tito_gateway.openai(api_key=rollout["token"])
    items: list[dict] = [{"role": "user", "content": "Fix the bug."}]
    for _ in range(TURNS):
        response = await client.responses.create(model="policy", input=items, tools=[RESPONSES_TOOL])
        for item in response.output:
            echoed = item.model_dump(exclude_none=True)
            if item.type == "function_call":
                echoed["arguments"] = json.dumps(json.loads(item.arguments), separators=(",", ":"))
            items.append(echoed)
            if item.type == "function_call":
                items.append({"type": "function_call_output", "call_id": item.call_id, "output": "x = 1\n"})
    assert response.output_text == "Done: the bug is fixed."
    await assert_one_sample_without_forks(tito_gateway, rollout["id"], "responses")
