"""TokenCaps (gateway/boundary/token_caps.py) at the ASGI level: a rollout token's requests in flight are
capped (429 with Retry-After, in the path's dialect) without touching another token's, the token is the
one the routes read (path, else a rollout API key), the table holds only tokens with requests in flight,
and a model route's body is read under the timeouts (408) while the response side never is."""

from __future__ import annotations

import asyncio

import pytest

from gateway.boundary import TokenCaps
from gateway.settings import GatewaySettings
from sandboxes import bridge_limits
from tests.held_calls import GatedApp, header, stalling_body, through, trickling_body
from tests.waiting import until

CAP = 3
CHAT = "/r/hrl-flood/v1/chat/completions"


def caps(app, read_s: float = 30.0, total_s: float = 300.0) -> TokenCaps:
    return TokenCaps(app, max_in_flight=CAP, body_read_timeout_s=read_s, body_timeout_s=total_s)


async def hold(layer: TokenCaps, app: GatedApp, paths_and_headers: list[tuple[str, dict]]) -> list[asyncio.Task]:
    before = app.waiting
    tasks = [asyncio.create_task(through(layer, path, headers)) for path, headers in paths_and_headers]
    await until(lambda: app.waiting == before + len(tasks), f"{len(tasks)} more calls held in the app")
    return tasks


async def test_a_token_past_its_cap_gets_429s_while_a_sibling_token_passes_and_it_works_again_after():
    app = GatedApp()
    layer = caps(app)
    held = await hold(layer, app, [(CHAT, {})] * CAP)

    over = [await through(layer, CHAT) for _ in range(3)]
    assert [r.status for r in over] == [429] * 3
    assert header(over[0], b"retry-after") == b"1" and header(over[0], b"connection") == b"close"
    error = over[0].body["error"]
    assert error["code"] == "too_many_in_flight" and "token_max_in_flight" in error["message"]
    sibling = await hold(layer, app, [("/r/hrl-sibling/v1/chat/completions", {})] * CAP)  # all reach the app
    assert layer.in_flight == {"hrl-flood": CAP, "hrl-sibling": CAP}

    app.gate.set()
    assert [(await t).status for t in held + sibling] == [200] * (2 * CAP)
    assert layer.in_flight == {}
    assert (await through(layer, CHAT)).status == 200


@pytest.mark.parametrize(
    "path, shape",
    [
        ("/r/hrl-flood/v1/messages", "anthropic"),
        ("/r/hrl-flood/v1/messages/count_tokens", "anthropic"),
        ("/r/hrl-flood/v1/responses", "openai"),
        ("/r/hrl-flood/v1/models", "openai"),
    ],
)
async def test_the_429_speaks_the_dialect_of_its_path(path, shape):
    app = GatedApp()
    layer = caps(app)
    held = await hold(layer, app, [(CHAT, {})] * CAP)
    refused = await through(layer, path)
    app.gate.set()
    await asyncio.gather(*held)
    assert refused.status == 429
    if shape == "anthropic":
        assert set(refused.body) == {"type", "error"} and refused.body["error"]["type"] == "rate_limit_error"
    else:
        error = refused.body["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_in_flight")


async def test_a_rollout_token_sent_as_the_api_key_counts_with_the_same_token_in_the_path():
    app = GatedApp()
    layer = caps(app)
    # as gateway.request.identity reads it: Bearer first (its value stripped as text), else x-api-key
    keys = [{"authorization": "Bearer hrl-flood"}, {"x-api-key": "hrl-flood"}]
    held = await hold(layer, app, [(CHAT, {}), *(("/v1/chat/completions", h) for h in keys)])
    variants = [{"authorization": "bearer  hrl-flood "}, {"authorization": "Basic x", "x-api-key": " hrl-flood"}]
    refused = [await through(layer, "/v1/messages", h) for h in variants]
    app.gate.set()
    await asyncio.gather(*held)
    assert [r.status for r in refused] == [429, 429]
    assert refused[0].body["type"] == "error"


async def test_live_keys_placeholder_keys_and_the_control_plane_are_not_counted():
    app = GatedApp()
    layer = caps(app)
    free = [
        ("/v1/chat/completions", {"authorization": "Bearer hrl-live-abc"}),
        ("/v1/chat/completions", {"authorization": "Bearer EMPTY"}),
        ("/v1/chat/completions", {}),
        ("/api/rollouts", {"authorization": "Bearer hrl-flood"}),
    ]
    held = await hold(layer, app, free * (CAP + 1))
    assert layer.in_flight == {}
    app.gate.set()
    assert {(await t).status for t in held} == {200}


async def test_many_distinct_tokens_leave_no_entry_behind():
    app = GatedApp()
    app.gate.set()
    layer = caps(app)
    for n in range(2000):
        await through(layer, f"/r/hrl-bogus-{n}/v1/chat/completions")
        await through(layer, "/v1/messages", {"x-api-key": f"hrl-bogus-{n}"})
    assert layer.in_flight == {} and layer.watch.waiting == {}


async def test_an_app_that_fails_frees_its_place():
    async def failing(scope, receive, send):
        raise RuntimeError("boom")

    layer = caps(failing)
    for _ in range(CAP + 1):
        with pytest.raises(RuntimeError):
            await through(layer, CHAT)
    assert layer.in_flight == {}


@pytest.mark.parametrize(
    "path, receive, setting",
    [
        (CHAT, stalling_body(), "body_read_timeout_s"),
        ("/r/hrl-slow/v1/messages", stalling_body(), "body_read_timeout_s"),
        ("/v1/chat/completions", stalling_body(), "body_read_timeout_s"),  # no token: still timed
        (CHAT, trickling_body(0.005), "body_timeout_s"),
    ],
)
async def test_a_slow_body_gets_408_in_its_dialect_and_the_app_sees_the_client_go(path, receive, setting):
    app = GatedApp()
    app.gate.set()
    read_s, total_s = (0.05, 30.0) if setting == "body_read_timeout_s" else (30.0, 0.1)
    layer = caps(app, read_s, total_s)
    refused = await through(layer, path, receive=receive)
    assert layer.watch.waiting == {}
    assert refused.status == 408 and header(refused, b"connection") == b"close"
    message = refused.body["error"]["message"]
    assert setting in message and (refused.body.get("type") == "error") == path.endswith("/messages")
    assert app.saw_disconnect and len([m for m in refused.sent if m["type"] == "http.response.start"]) == 1


async def test_a_request_cancelled_while_its_body_is_read_stays_cancelled_and_frees_its_place():
    app = GatedApp()
    layer = caps(app)
    reading = asyncio.create_task(through(layer, CHAT, receive=stalling_body()))
    await until(lambda: layer.watch.waiting, "the body read waiting")
    reading.cancel()  # e.g. the server shutting down: not the layer's to swallow
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert (layer.in_flight, layer.watch.waiting, app.saw_disconnect) == ({}, {}, False)


async def test_the_control_plane_body_is_not_timed():
    app = GatedApp()
    app.gate.set()
    chunks = iter([b"{", b"}"])

    async def receive():
        await asyncio.sleep(0.05)
        chunk = next(chunks)
        return {"type": "http.request", "body": chunk, "more_body": chunk == b"{"}

    answered = await through(caps(app, read_s=0.01, total_s=0.01), "/api/rollouts", receive=receive)
    assert answered.status == 200


async def test_the_response_side_is_never_timed_out():
    """Past the body the app waits for a disconnect longer than both timeouts while it streams: no 408."""
    waited = asyncio.Event()

    async def streaming(scope, receive, send):
        assert (await receive())["type"] == "http.request"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(3):
            await send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": True})
            await asyncio.sleep(0.03)
        await send({"type": "http.response.body", "body": b""})
        assert (await receive())["type"] == "http.disconnect"

    calls = 0

    async def receive():
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await asyncio.sleep(0.05)
        waited.set()
        return {"type": "http.disconnect"}

    recorded = await through(caps(streaming, read_s=0.01, total_s=0.01), CHAT, receive=receive)
    assert recorded.status == 200 and waited.is_set()
    assert sum(1 for m in recorded.sent if m["type"] == "http.response.body") == 4


def test_the_settings_defaults_mirror_a_bridges_caps():
    settings = GatewaySettings(database_url="sqlite://", admin_key="k")
    assert settings.token_max_in_flight == bridge_limits.MAX_IN_FLIGHT
    assert settings.body_read_timeout_s == bridge_limits.BODY_READ_TIMEOUT_S
    assert settings.body_timeout_s == bridge_limits.BODY_TIMEOUT_S
    assert settings.keep_alive_timeout_s == bridge_limits.IDLE_TIMEOUT_S
    assert settings.header_timeout_s == bridge_limits.HEADER_TIMEOUT_S
    assert settings.token_max_connections == bridge_limits.MAX_CONNECTIONS
    for field, value in (
        ("token_max_in_flight", 0),
        ("token_max_connections", 0),
        ("body_read_timeout_s", 0.0),
        ("body_timeout_s", -1.0),
        ("header_timeout_s", 0.0),
    ):
        with pytest.raises(ValueError, match=field):
            GatewaySettings(database_url="sqlite://", admin_key="k", **{field: value})
