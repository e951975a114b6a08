"""The HTTP-aware host end of a sandbox's route (sandboxes/bridge.py), against a recording upstream.

The upstream is a real uvicorn server (as the gateway is) that records every request it sees. The
agent side talks to the bridge's unix socket, as the in-sandbox forwarder does: with httpx for the
requests that must pass, with raw bytes for the tricks that must not.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from sandboxes import SandboxError
from sandboxes.bridge import HostBridge
from sandboxes.route import Route
from tests.bridge_peers import raw_exchange, raw_request, recording_upstream

MINE = "/r/hrl-mine/v1"
HOST = "127.0.0.1:8000"  # what the agent's clients send inside the sandbox


@pytest.fixture
async def upstream():
    async with recording_upstream() as recorder:
        yield recorder


@pytest.fixture
async def bridge(upstream, tmp_path):
    route = Route.for_gateway(f"http://127.0.0.1:{upstream.port}{MINE}", port_inside=8000)
    bridge = await HostBridge(str(tmp_path / "gw.sock"), route).start()
    yield bridge
    await bridge.close()


def agent(bridge: HostBridge) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(uds=bridge.socket_path)
    return httpx.AsyncClient(transport=transport, base_url=f"http://{HOST}", timeout=60)


async def test_every_model_endpoint_of_the_own_rollout_passes_on_one_connection(bridge, upstream):
    async with agent(bridge) as http:
        for method, path in [
            ("POST", "chat/completions"),
            ("POST", "completions"),
            ("POST", "responses"),
            ("POST", "messages?beta=true"),
            ("POST", "messages/count_tokens?beta=true"),
            ("GET", "models"),
        ]:
            reply = await http.request(method, f"{MINE}/{path}", json={"model": "policy"} if method == "POST" else None)
            assert reply.status_code == 200, reply.text
            assert reply.json()["path"] == f"{MINE}/{path.partition('?')[0]}"
    assert [r.query for r in upstream.requests][3:5] == [b"beta=true", b"beta=true"]
    assert len({r.client for r in upstream.requests}) == 1  # keep-alive: one connection both ways


async def test_streaming_responses_arrive_chunk_by_chunk(bridge, upstream):
    async with agent(bridge) as http:
        async with http.stream("POST", f"{MINE}/chat/completions", json={"stream": True}) as reply:
            assert reply.headers["content-type"].startswith("text/event-stream")
            chunks = reply.aiter_raw()
            # sent while the upstream still holds the rest (a buffering bridge never sends it before)
            first = await asyncio.wait_for(anext(chunks), 60)
            assert b"data: first" in first
            upstream.release.set()
            rest = b"".join([chunk async for chunk in chunks])
        assert b"data: second" in rest and b"data: [DONE]" in rest
        again = await http.get(f"{MINE}/models")  # the same connection goes on after a stream
        assert again.status_code == 200


async def test_large_and_chunked_bodies_pass_whole(bridge, upstream):
    body = b"x" * (8 * 1024 * 1024)

    async def pieces():
        for _ in range(4):
            yield b"y" * 100_000

    async with agent(bridge) as http:
        assert (await http.post(f"{MINE}/chat/completions", content=body)).json()["bytes"] == len(body)
        assert (await http.post(f"{MINE}/responses", content=pieces())).json()["bytes"] == 400_000
    assert [len(r.body) for r in upstream.requests] == [len(body), 400_000]


async def test_expect_100_continue_is_answered_by_the_bridge(bridge, upstream):
    reader, writer = await asyncio.open_unix_connection(bridge.socket_path)
    writer.write(
        raw_request("POST", f"{MINE}/chat/completions", extra=b"expect: 100-continue\r\ncontent-length: 2\r\n")
    )
    assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 100")
    writer.write(b"{}")
    reply = await asyncio.wait_for(reader.readuntil(b'"bytes": 2}'), 5)
    writer.close()
    assert b"HTTP/1.1 200" in reply and len(upstream.requests) == 1


async def test_headers_are_the_gateways_host_and_the_sandboxs_own_token(bridge, upstream):
    headers = {
        "authorization": "Bearer hrl-sibling",
        "x-api-key": "hrl-sibling",
        "x-admin-key": "stolen",
        "x-forwarded-for": "10.0.0.1",
        "forwarded": "for=10.0.0.1",
        "proxy-authorization": "Basic eA==",
        "keep-alive": "timeout=5",
        "anthropic-beta": "tools-2024",
        "x-session-id": "s1",
    }
    async with agent(bridge) as http:
        assert (await http.post(f"{MINE}/messages", json={}, headers=headers)).status_code == 200
    [seen] = upstream.requests
    assert seen.headers["host"] == f"127.0.0.1:{upstream.port}"
    assert seen.headers["authorization"] == "Bearer hrl-mine" and seen.headers["x-api-key"] == "hrl-mine"
    assert seen.headers["anthropic-beta"] == "tools-2024" and seen.headers["x-session-id"] == "s1"
    for name in ("x-admin-key", "x-forwarded-for", "forwarded", "proxy-authorization", "keep-alive"):
        assert name not in seen.headers, name


TRICKS = {
    "control plane": raw_request("GET", "/api/runs"),
    "reward": raw_request("POST", "/api/rollouts/1/reward", body=b'{"reward": 1000}'),
    "new rollout": raw_request("POST", "/api/rollouts", body=b"{}"),
    "publish": raw_request("POST", "/admin/adapters", body=b"{}"),
    "admin read": raw_request("GET", "/admin/policy"),
    "viewer": raw_request("GET", "/ui/"),
    "no token": raw_request("GET", "/v1/models"),
    "sibling token": raw_request("POST", "/r/hrl-sibling/v1/chat/completions", body=b"{}"),
    "dot-dot": raw_request("POST", f"{MINE}/../../api/rollouts", body=b"{}"),
    "encoded dot-dot": raw_request("GET", f"{MINE}/%2e%2e/%2e%2e/api/runs"),
    "encoded slash": raw_request("POST", f"{MINE}/chat%2Fcompletions", body=b"{}"),
    "encoded token": raw_request("GET", "/r/hrl-mine%2Fv1/models"),
    "dot segment": raw_request("GET", f"{MINE}/./models"),
    "double slash": raw_request("GET", f"/{MINE}/models"),
    "trailing slash": raw_request("GET", f"{MINE}/models/"),
    "encoded query": raw_request("GET", f"{MINE}/models?next=%2e%2e"),
    "fragment": raw_request("GET", f"{MINE}/models#x"),
    "wrong method": raw_request("DELETE", f"{MINE}/models"),
    "absolute form": raw_request("GET", f"http://{HOST}{MINE}/models"),
    "absolute form elsewhere": raw_request("GET", "http://127.0.0.1:8000/api/runs"),
    "connect": raw_request("CONNECT", "127.0.0.1:8000"),
    "asterisk": raw_request("OPTIONS", "*"),
    "websocket": raw_request("GET", f"{MINE}/models", extra=b"connection: Upgrade\r\nupgrade: websocket\r\n"),
    "h2c": raw_request(
        "GET",
        f"{MINE}/models",
        extra=b"connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n",
    ),
    "bad host": raw_request("GET", f"{MINE}/models", host="evil.example"),
    "gateway host": raw_request("GET", f"{MINE}/models", host="127.0.0.1:9999"),
    "two hosts": raw_request("GET", f"{MINE}/models", extra=b"host: evil\r\n"),
    "http/1.0 without host": f"GET {MINE}/models HTTP/1.0\r\n\r\n".encode(),
    "garbage": b"hello there\r\n\r\n",
    "http/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "refused then allowed": raw_request("GET", "/api/runs") + raw_request("GET", f"{MINE}/models"),
}


@pytest.mark.parametrize("trick", TRICKS, ids=list(TRICKS))
async def test_every_trick_is_refused_with_a_403_and_never_reaches_the_gateway(bridge, upstream, trick):
    replies = await raw_exchange(bridge.socket_path, TRICKS[trick])
    assert [status for status, _ in replies] == [403], replies
    error = json.loads(replies[0][1])["error"]
    assert error["code"] == "sandbox_route_forbidden" and error["type"] == "permission_error"
    assert upstream.requests == []


async def test_a_pipelined_request_after_an_allowed_one_is_checked_on_its_own(bridge, upstream):
    evil = raw_request("GET", f"{MINE}/models", host="evil") + raw_request("GET", "/api/runs")
    replies = await raw_exchange(bridge.socket_path, raw_request("GET", f"{MINE}/models") + evil)
    assert [status for status, _ in replies] == [200, 403]
    assert [r.path for r in upstream.requests] == [f"{MINE}/models"]


async def test_a_gateway_that_is_down_is_a_502(tmp_path):
    route = Route.for_gateway(f"http://127.0.0.1:1{MINE}", port_inside=8000)
    bridge = await HostBridge(str(tmp_path / "gw.sock"), route).start()
    try:
        [(status, body)] = await raw_exchange(bridge.socket_path, raw_request("GET", f"{MINE}/models"))
        assert status == 502 and "not reachable" in json.loads(body)["error"]["message"]
    finally:
        await bridge.close()


def test_the_route_needs_a_rollout_base_url():
    with pytest.raises(SandboxError, match=r"/r/<token>/v1"):
        Route.for_gateway("http://127.0.0.1:8000/v1")
    route = Route.for_gateway("http://gw.example:9000/r/hrl-x/v1/")
    assert (route.prefix, route.token, route.upstream) == ("/r/hrl-x/v1", "hrl-x", ("gw.example", 9000))
    assert route.hosts == {b"127.0.0.1:9000", b"localhost:9000"}


# --- the rollout's tools route (OpenEnv environments' MCP): its own token's passes, nothing around it ---


async def test_the_own_rollouts_tools_route_passes_with_the_sandboxs_token(bridge, upstream):
    async with agent(bridge) as http:
        for method in ("POST", "GET", "DELETE"):
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"} if method == "POST" else None
            reply = await http.request(
                method,
                f"{MINE}/tools/mcp",
                json=body,
                headers={"authorization": "Bearer hrl-sibling", "mcp-protocol-version": "2025-06-18"},
            )
            assert reply.status_code == 200, reply.text
    assert [(r.method, r.path) for r in upstream.requests] == [
        ("POST", f"{MINE}/tools/mcp"),
        ("GET", f"{MINE}/tools/mcp"),
        ("DELETE", f"{MINE}/tools/mcp"),
    ]
    assert {r.headers["authorization"] for r in upstream.requests} == {"Bearer hrl-mine"}
    assert upstream.requests[0].headers["mcp-protocol-version"] == "2025-06-18"


TOOLS_TRICKS = {
    "sibling's tools": raw_request("POST", "/r/hrl-sibling/v1/tools/mcp", body=b"{}"),
    "below the route": raw_request("POST", f"{MINE}/tools/mcp/x", body=b"{}"),
    "beside the route": raw_request("POST", f"{MINE}/tools/other", body=b"{}"),
    "up from the route": raw_request("POST", f"{MINE}/tools/mcp/../../../api/rollout-tools", body=b"{}"),
    "encoded up": raw_request("POST", f"{MINE}/tools/%2e%2e/mcp", body=b"{}"),
    "registration": raw_request("PUT", "/api/rollout-tools", body=b'{"token": "hrl-mine", "url": "http://x"}'),
    "another method": raw_request("PUT", f"{MINE}/tools/mcp", body=b"{}"),
    "websocket": raw_request("GET", f"{MINE}/tools/mcp", extra=b"connection: Upgrade\r\nupgrade: websocket\r\n"),
}


@pytest.mark.parametrize("trick", TOOLS_TRICKS, ids=list(TOOLS_TRICKS))
async def test_tricks_around_the_tools_route_never_reach_the_gateway(bridge, upstream, trick):
    replies = await raw_exchange(bridge.socket_path, TOOLS_TRICKS[trick])
    assert [status for status, _ in replies] == [403], replies
    assert json.loads(replies[0][1])["error"]["code"] == "sandbox_route_forbidden"
    assert upstream.requests == []
