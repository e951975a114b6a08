"""Bad Anthropic requests: 400/413 in Anthropic's error JSON naming the field, nothing recorded, typed exceptions in the SDK."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.anthropic_calls import HI, recorded_calls, sdk
from tests.builders import gateway_settings
from tests.gateway_harness import start_gateway


def assert_anthropic_error(response: httpx.Response, status: int, kind: str = "invalid_request_error") -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    assert body["error"]["message"] and "Traceback" not in body["error"]["message"]
    return body["error"]["message"]


def messages_body(**overrides) -> dict:
    return {"model": "policy", "max_tokens": 16, "messages": HI, **overrides}


CALLED = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "policy", "messages": HI}, "max_tokens"),
        (messages_body(max_tokens="lots"), "max_tokens"),
        (messages_body(max_tokens=0), "max_tokens"),
        ({"max_tokens": 16, "messages": HI}, "model"),
        (messages_body(messages=[]), "messages"),
        (messages_body(messages="hello"), "messages"),
        (messages_body(messages=[{"role": "wizard", "content": "hi"}]), "messages.0"),
        (messages_body(messages=[*HI, {"role": "system", "content": 7}]), "messages.1.content"),
        (messages_body(messages=[{"role": "user", "content": 7}]), "messages.0.content"),
        (messages_body(messages=[{"role": "user", "content": []}]), "messages.0.content"),
        (messages_body(messages=[{"role": "user", "content": [{"type": "banana"}]}]), "messages.0.content.0"),
        (messages_body(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages.0.content.0.text"),
        (
            messages_body(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]),
            "messages.0.content.0.tool_use_id",
        ),
        (
            messages_body(
                messages=[
                    *HI,
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
                    CALLED,
                ]
            ),
            "messages.1.content.0.tool_use_id",
        ),
        (
            messages_body(
                messages=[
                    *HI,
                    CALLED,
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}]},
                ]
            ),
            "messages.2.content.0.tool_use_id",
        ),
        (
            messages_body(
                messages=[
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}
                ]
            ),
            "messages.0.content.0.input",
        ),
        (
            messages_body(
                messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]
            ),
            "messages.0.content.0.source",
        ),
        (
            messages_body(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
                            }
                        ],
                    }
                ]
            ),
            "messages.0.content.0.source",
        ),
        (messages_body(system=7), "system"),
        (messages_body(temperature="hot"), "temperature"),
        (messages_body(temperature=3), "temperature"),
        (messages_body(stop_sequences="END"), "stop_sequences"),
        (messages_body(stream="sometimes"), "stream"),
        (messages_body(tools=[{"name": "get_weather"}]), "tools.0.input_schema"),
        (messages_body(tool_choice={"type": "tool"}), "tool_choice"),
        (messages_body(tool_choice={"type": "maybe"}), "tool_choice.type"),
        (messages_body(thinking={"type": "enabled", "budget_tokens": "many"}), "thinking.budget_tokens"),
    ],
)
async def test_malformed_bodies_are_400_naming_the_field_and_record_nothing(gateway, body, field):
    rollout = await gateway.new_rollout()
    response = await gateway.http.post("/v1/messages", json=body, headers={"x-api-key": rollout["token"]})
    message = assert_anthropic_error(response, 400)
    assert message.startswith(f"{field}:"), message
    assert await recorded_calls(gateway, rollout["id"]) == [] and gateway.fake.requests == []


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{}", b"[1, 2]", b""])
async def test_unparsable_bodies_are_400(gateway, path, content):
    response = await gateway.http.post(path, content=content, headers={"content-type": "application/json"})
    assert_anthropic_error(response, 400)
    assert gateway.fake.requests == []


async def test_count_tokens_checks_its_body_too(gateway):
    message = assert_anthropic_error(
        await gateway.http.post("/v1/messages/count_tokens", json={"model": "policy", "messages": []}), 400
    )
    assert message.startswith("messages:")


async def test_huge_body_is_413_and_records_nothing(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_body_bytes=1000)
    async for gateway in start_gateway(settings, fake_engine):
        rollout = await gateway.new_rollout()
        response = await gateway.http.post(
            f"/r/{rollout['token']}/v1/messages", json=messages_body(messages=[{"role": "user", "content": "x" * 5000}])
        )
        assert_anthropic_error(response, 413, "request_too_large")
        assert await recorded_calls(gateway, rollout["id"]) == [] and fake_engine.requests == []


async def test_sdk_sees_errors_as_typed_exceptions(gateway, sdk_http):
    rollout = await gateway.new_rollout()
    client = sdk(sdk_http, rollout["base_url"])
    with pytest.raises(anthropic.BadRequestError) as raised:
        await client.messages.create(
            model="policy",
            max_tokens=16,
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"}]}],
        )
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert "tool result without a call" in raised.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as too_long:  # the engine's 400, passed on in this shape
        await client.messages.create(model="policy", max_tokens=16, messages=[{"role": "user", "content": "z" * 3000}])
    assert "2048" in too_long.value.body["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError):
        await sdk(sdk_http, api_key="hrl-forged").messages.create(model="policy", max_tokens=16, messages=HI)
    assert await recorded_calls(gateway, rollout["id"]) == []
