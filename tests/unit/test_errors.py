"""Bad input and engine failures come back as OpenAI error JSON, and nothing is half-recorded."""

from __future__ import annotations

import logging

import httpx
import openai
import pytest

from gateway.app import create_app
from tests.builders import ADMIN_HEADERS, chat_body, gateway_settings
from tests.gateway_harness import start_gateway


def assert_openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"] and "Traceback" not in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize(
    "body",
    [
        {"model": "policy"},
        {"model": "policy", "messages": []},
        {"model": "policy", "messages": "hello"},
        {"model": "policy", "messages": [{"role": "wizard", "content": "hi"}]},
        {"model": "policy", "messages": [{"role": "user", "content": 7}]},
        {"model": "policy", "messages": [{"role": "tool", "content": "result"}]},
        chat_body(temperature="hot"),
        chat_body(n=3),
        chat_body(max_tokens=0),
        chat_body(tools=[{"type": "function"}]),
        chat_body(tool_choice="sometimes"),
    ],
)
async def test_malformed_chat_bodies_are_400(gateway, body):
    assert_openai_error(await gateway.http.post("/v1/chat/completions", json=body), 400)
    assert gateway.fake.requests == []


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe{}", b"[1, 2]", b""])
async def test_unparsable_bodies_are_400(gateway, content):
    response = await gateway.http.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 400)


async def test_huge_body_is_413(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_body_bytes=1000)
    async for gateway in start_gateway(settings, fake_engine):
        response = await gateway.http.post("/v1/chat/completions", json=chat_body("x" * 5000))
        assert_openai_error(response, 413)


async def test_prompt_over_the_context_limit_is_400_naming_the_limit(gateway):
    response = await gateway.http.post("/v1/chat/completions", json=chat_body("y" * 3000))
    error = assert_openai_error(response, 400)
    assert "2048" in error["message"]


async def test_unknown_token_is_401(gateway):
    response = await gateway.http.post("/r/hrl-nope/v1/chat/completions", json=chat_body())
    assert_openai_error(response, 401)
    response = await gateway.http.post(
        "/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer hrl-forged"}
    )
    assert_openai_error(response, 401)


async def test_require_token_refuses_anonymous_calls(strict_gateway):
    response = await strict_gateway.http.post("/v1/chat/completions", json=chat_body())
    assert_openai_error(response, 401)
    rollout = await strict_gateway.new_rollout()
    ok = await strict_gateway.http.post(
        "/v1/chat/completions", json=chat_body(), headers={"authorization": f"Bearer {rollout['token']}"}
    )
    assert ok.status_code == 200


async def test_engine_down_is_503_with_retry_after_naming_no_engine_address(sqlite_db, caplog):
    settings = gateway_settings(sqlite_db, "http://127.0.0.1:9", base_model="base")
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://gateway", headers=ADMIN_HEADERS
        ) as http:
            with caplog.at_level(logging.WARNING):
                response = await http.post("/v1/chat/completions", json=chat_body())
            error = assert_openai_error(response, 503)
            assert response.headers["retry-after"].isdigit()
            assert "127.0.0.1" not in error["message"] and "unreachable" in error["message"]  # an agent reads it
            assert any("127.0.0.1:9" in r.getMessage() for r in caplog.records)  # the operator's log names it
            assert (await http.get("/admin/engines")).json()[0]["url"] == "http://127.0.0.1:9"  # and the admin's view
            runs = (await http.get("/api/runs")).json()["data"]
            assert runs == [] or all(r["name"] == "adhoc" for r in runs)


async def test_sdk_sees_errors_as_typed_exceptions(gateway):
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "z" * 3000}])


async def test_rest_not_found_and_bad_rollout_body(gateway):
    assert_openai_error(await gateway.http.get("/api/rollouts/999"), 404)
    assert_openai_error(await gateway.http.get("/api/calls/999"), 404)
    assert_openai_error(await gateway.http.post("/api/rollouts", json={"run": "r"}), 400)
    assert_openai_error(await gateway.http.post("/api/rollouts", json={"run": "", "task": "t"}), 400)
    assert_openai_error(await gateway.http.get("/api/runs?limit=0"), 400)


async def test_a_hung_engine_gives_a_504_naming_no_engine_address(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, engine_timeout_s=0.3)
    app = create_app(settings)  # the gateway's own engine client, built from the settings
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gateway") as agent:
            fake_engine.delay_s = 2.0
            response = await agent.post("/v1/chat/completions", json=chat_body())
    error = assert_openai_error(response, 504)
    assert "did not answer within" in error["message"]
    assert str(fake_engine_server.port) not in error["message"] and fake_engine_server.host not in error["message"]
