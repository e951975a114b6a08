"""The Anthropic SDK against the in-process gateway, and reading back what it recorded."""

from __future__ import annotations

import httpx2
from anthropic import AsyncAnthropic

from tests.gateway_harness import GatewayHarness

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HI = [{"role": "user", "content": "Hi"}]
EPHEMERAL = {"type": "ephemeral"}  # prompt caching: accepted, means nothing to the engine


def sdk(http: httpx2.AsyncClient, base_url: str = "http://gateway", api_key: str = "EMPTY") -> AsyncAnthropic:
    # The SDK appends /v1/messages itself: a rollout's base_url loses its trailing /v1.
    return AsyncAnthropic(base_url=base_url.removesuffix("/v1"), api_key=api_key, http_client=http, max_retries=0)


async def recorded_calls(gateway: GatewayHarness, rollout_id: int) -> list[dict]:
    response = await gateway.http.get(f"/api/rollouts/{rollout_id}/calls")
    assert response.status_code == 200
    return response.json()["data"]


def patch_engine_answer(gateway: GatewayHarness, monkeypatch, edit) -> None:
    """Let ``edit`` change what the engine answers (what the fake engine cannot produce itself)."""
    engine = gateway.app.state.gateway.engine
    original = engine.chat

    async def chat(body: dict) -> dict:
        answer = await original(body)
        edit(answer["choices"][0])
        return answer

    monkeypatch.setattr(engine, "chat", chat)
