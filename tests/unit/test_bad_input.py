"""Bad input an adversarial client sends: integers past the store's columns, JSON nested 50,000 deep,
bodies past the limit (counted while they stream in), and what a 500 and a timestamp look like."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

import pytest

from tests.builders import chat_body, gateway_settings
from tests.gateway_harness import start_gateway
from tests.unit.test_errors import assert_openai_error

BIG = 2**63


@pytest.mark.parametrize(
    "method, url",
    [
        ("GET", f"/api/rollouts/{BIG}"),
        ("GET", f"/api/rollouts/{BIG}/calls"),
        ("GET", f"/api/rollouts/{BIG}/samples"),
        ("GET", f"/api/rollouts/{BIG}/conversation"),
        ("GET", f"/api/calls/{BIG}"),
        ("GET", f"/api/groups/{BIG}"),
        ("GET", f"/api/rollouts?after={BIG}"),
        ("GET", f"/api/rollouts?group_id={BIG}"),
        ("GET", f"/api/rollouts?policy_version={BIG}"),
        ("GET", f"/api/calls?rollout_id={BIG}"),
        ("GET", f"/api/calls?after={-BIG - 1}"),
        ("GET", f"/api/groups?after={BIG}"),
        ("GET", f"/api/runs?after={BIG}"),
        ("GET", f"/api/runs/test-run/steps?after={BIG}"),
        ("POST", f"/api/rollouts/{BIG}/reward"),
        ("POST", f"/api/rollouts/{BIG}/end"),
    ],
)
async def test_integers_beyond_the_store_columns_are_400(gateway, method, url):
    await gateway.new_rollout()
    body = {"reward": {"value": 1.0}, "finish": {"status": "finished"}}.get(url.rsplit("/", 1)[-1])
    response = await gateway.http.request(method, url, json=body)
    error = assert_openai_error(response, 400)
    assert "less than or equal" in error["message"] or "greater than or equal" in error["message"]


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize(
    "path, anthropic",
    [
        ("/v1/chat/completions", False),
        ("/v1/completions", False),
        ("/v1/responses", False),
        ("/v1/messages", True),
        ("/v1/messages/count_tokens", True),
        ("/api/rollouts", False),
        ("/admin/adapters", False),
    ],
)
@pytest.mark.parametrize("depth", [50_000, 500])
async def test_json_nested_too_deep_is_400_in_the_dialects_shape(gateway, path, anthropic, depth):
    response = await gateway.http.post(path, content=nested(depth), headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    if anthropic:
        assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"
    else:
        assert_openai_error(response, 400)
    assert gateway.fake.requests == []


async def test_meta_nested_too_deep_is_refused_not_stored(gateway):
    meta: dict = {}
    for _ in range(500):
        meta = {"a": meta}
    response = await gateway.http.post("/api/rollouts", json={"run": "r", "task": "t", "meta": meta})
    assert_openai_error(response, 400)
    assert (await gateway.http.get("/api/runs")).json()["data"] == []


async def test_api_and_model_bodies_over_the_limit_are_413(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_body_bytes=10_000)
    async for gateway in start_gateway(settings, fake_engine):
        meta = {"blob": "x" * 20_000}
        assert_openai_error(await gateway.http.post("/api/rollouts", json={"run": "r", "task": "t", "meta": meta}), 413)

        async def chunks():
            for _ in range(10):
                yield b" " * 4096  # no Content-Length: only counting catches it

        response = await gateway.http.post(
            "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}
        )
        assert_openai_error(response, 413)
        assert (await gateway.http.get("/api/runs")).json()["data"] == []


async def test_500_names_an_error_id_not_the_exception_and_is_logged_once(gateway, monkeypatch, caplog):
    async def broken(*args, **kwargs):
        raise RuntimeError("password=hunter2 at /srv/secret/path")

    monkeypatch.setattr(gateway.app.state.gateway.store.listings, "runs", broken)
    with caplog.at_level(logging.ERROR):
        response = await gateway.http.get("/api/runs")
    error = assert_openai_error(response, 500)
    error_id = response.headers["x-harnessrl-error-id"]
    assert error_id.startswith("err-") and error_id in error["message"]
    assert "hunter2" not in response.text and "RuntimeError" not in response.text
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 1 and error_id in logged[0].getMessage()


async def test_500_on_the_messages_route_is_in_anthropics_shape(gateway, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gateway.app.state.gateway, "pipeline", broken)
    response = await gateway.http.post(
        "/v1/messages", json={"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert response.status_code == 500
    assert response.json()["type"] == "error" and "err-" in response.json()["error"]["message"]


def aware_utc(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.tzinfo is not None and parsed.utcoffset() == timedelta(0), value
    return parsed


async def test_timestamps_in_responses_carry_their_timezone(gateway):
    rollout = await gateway.new_rollout()
    call = await gateway.http.post(f"/r/{rollout['token']}/v1/chat/completions", json=chat_body())
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished"})
    view = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()
    aware_utc(view["created_at"]), aware_utc(view["finished_at"])
    aware_utc((await gateway.http.get("/api/rollouts")).json()["data"][0]["created_at"])
    run = (await gateway.http.get("/api/runs")).json()["data"][0]
    aware_utc(run["created_at"]), aware_utc(run["last_activity"])
    aware_utc((await gateway.http.get(f"/api/calls/{call.headers['x-harnessrl-call-id']}")).json()["created_at"])
    aware_utc((await gateway.http.get("/api/groups")).json()["data"][0]["created_at"])


MODEL_ROUTES = [
    ("/v1/chat/completions", False),
    ("/v1/completions", False),
    ("/v1/responses", False),
    ("/v1/messages", True),
    ("/v1/messages/count_tokens", True),
]
JSON = {"content-type": "application/json"}


def any_dialect_body(extra: str = "", content: str = "hi") -> bytes:
    """One body every model route reads (each takes its own fields and refuses what is wrong in them)."""
    text = f'"{content}"'  # as written: escapes stay escapes
    message = '{"role": "user", "content": ' + text + "}"
    return (
        f'{{"model": "policy", "max_tokens": 8, "prompt": {text}, "input": {text}, "messages": [{message}]{extra}}}'
    ).encode()


def assert_dialect_error(response, status: int, anthropic: bool) -> str:
    """The error's message, after checking it came in the route's dialect."""
    assert response.status_code == status, response.text
    if anthropic:
        assert response.json()["type"] == "error"
        return response.json()["error"]["message"]
    return assert_openai_error(response, status)["message"]


@pytest.mark.parametrize("path, anthropic", MODEL_ROUTES)
@pytest.mark.parametrize("where", ['"seed": {}', '"metadata": {{"n": {}}}'])
async def test_an_integer_of_5000_digits_is_400_in_the_dialect(gateway, path, anthropic, where):
    body = any_dialect_body(", " + where.format("7" * 5000))
    response = await gateway.http.post(path, content=body, headers=JSON)
    assert "more than 4300 digits" in assert_dialect_error(response, 400, anthropic)
    assert gateway.fake.requests == []


@pytest.mark.parametrize("path, anthropic", MODEL_ROUTES)
async def test_a_lone_surrogate_escape_is_400_in_the_dialect(gateway, path, anthropic):
    response = await gateway.http.post(path, content=any_dialect_body(content="hi \\udfff"), headers=JSON)
    assert "invalid UTF-16 surrogate" in assert_dialect_error(response, 400, anthropic)
    assert gateway.fake.requests == []


@pytest.mark.parametrize("path, anthropic", MODEL_ROUTES)
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_no_json_and_are_400_in_the_dialect(gateway, path, anthropic, constant):
    response = await gateway.http.post(path, content=any_dialect_body(f', "temperature": {constant}'), headers=JSON)
    assert f"{constant} is no JSON number" in assert_dialect_error(response, 400, anthropic)
    assert gateway.fake.requests == []


async def test_nan_in_a_rollouts_next_turn_is_400_and_nothing_is_recorded_of_it(gateway):
    rollout = await gateway.new_rollout()
    url, first = f"/r/{rollout['token']}/v1/chat/completions", '{"role": "user", "content": "hi"}'
    turn = '{"model": "policy", "messages": [' + first + "]"
    assert (await gateway.agent.post(url, content=turn + "}", headers=JSON)).status_code == 200
    response = await gateway.agent.post(url, content=turn + ', "top_p": NaN}', headers=JSON)
    assert "NaN is no JSON number" in assert_openai_error(response, 400)["message"]
    assert len(gateway.fake.requests) == 1


async def test_a_lone_surrogate_in_a_rollouts_next_turn_is_400_and_pairs_are_characters(gateway):
    rollout = await gateway.new_rollout()
    url, first = f"/r/{rollout['token']}/v1/chat/completions", '{"role": "user", "content": "hi \\ud83d\\ude00"}'

    def turn(*messages: str) -> bytes:
        return ('{"model": "policy", "messages": [' + ", ".join(messages) + "]}").encode()

    assert (await gateway.agent.post(url, content=turn(first), headers=JSON)).status_code == 200  # a pair: 😀
    lone = '{"role": "user", "content": "\\ud83d then"}'
    response = await gateway.agent.post(
        url, content=turn(first, '{"role": "assistant", "content": "x"}', lone), headers=JSON
    )
    assert "invalid UTF-16 surrogate (\\ud83d" in assert_openai_error(response, 400)["message"]
    assert len(gateway.fake.requests) == 1


@pytest.mark.parametrize("path, anthropic", MODEL_ROUTES)
@pytest.mark.parametrize(
    "content_type", ["text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", None]
)
async def test_a_model_body_not_sent_as_json_is_415_in_the_dialect(gateway, path, anthropic, content_type):
    # What a web page may POST across sites without asking (no CORS preflight) to an open gateway.
    headers = {"content-type": content_type} if content_type else {}
    response = await gateway.agent.post(path, content=any_dialect_body(), headers=headers)
    assert "Content-Type: application/json" in assert_dialect_error(response, 415, anthropic)
    assert gateway.fake.requests == []


async def test_a_json_body_with_a_charset_is_served(gateway):
    response = await gateway.agent.post(
        "/v1/chat/completions",
        content=json.dumps(chat_body()),
        headers={"content-type": "Application/JSON; charset=utf-8"},
    )
    assert response.status_code == 200, response.text
