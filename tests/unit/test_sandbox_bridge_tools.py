"""The sandbox bridge and the rollout's tools route: its own token's tools/mcp passes, nothing around it does."""

from __future__ import annotations

import json

import httpx
import pytest

from sandboxes.bridge import HostBridge, Route
from tests.bridge_peers import RecordingUpstream, raw_exchange, raw_request, running_upstream

MINE = "/r/hrl-mine/v1"
HOST = "127.0.0.1:8000"


@pytest.fixture
async def upstream():
    recorder = RecordingUpstream()
    async with running_upstream(recorder) as port:
        recorder.port = port
        yield recorder


@pytest.fixture
async def bridge(upstream, tmp_path):
    route = Route.for_gateway(f"http://127.0.0.1:{upstream.port}{MINE}", port_inside=8000)
    bridge = await HostBridge(str(tmp_path / "gw.sock"), route).start()
    yield bridge
    await bridge.close()


async def test_the_own_rollouts_tools_route_passes_with_the_sandboxs_token(bridge, upstream):
    transport = httpx.AsyncHTTPTransport(uds=bridge.socket_path)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{HOST}", timeout=10) as http:
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


TRICKS = {
    "sibling's tools": raw_request("POST", "/r/hrl-sibling/v1/tools/mcp", body=b"{}"),
    "below the route": raw_request("POST", f"{MINE}/tools/mcp/x", body=b"{}"),
    "beside the route": raw_request("POST", f"{MINE}/tools/other", body=b"{}"),
    "up from the route": raw_request("POST", f"{MINE}/tools/mcp/../../../api/rollout-tools", body=b"{}"),
    "encoded up": raw_request("POST", f"{MINE}/tools/%2e%2e/mcp", body=b"{}"),
    "registration": raw_request("PUT", "/api/rollout-tools", body=b'{"token": "hrl-mine", "url": "http://x"}'),
    "another method": raw_request("PUT", f"{MINE}/tools/mcp", body=b"{}"),
    "websocket": raw_request("GET", f"{MINE}/tools/mcp", extra=b"connection: Upgrade\r\nupgrade: websocket\r\n"),
}


@pytest.mark.parametrize("trick", TRICKS, ids=list(TRICKS))
async def test_tricks_around_the_tools_route_never_reach_the_gateway(bridge, upstream, trick):
    replies = await raw_exchange(bridge.socket_path, TRICKS[trick])
    assert [status for status, _ in replies] == [403], replies
    assert json.loads(replies[0][1])["error"]["code"] == "sandbox_route_forbidden"
    assert upstream.requests == []
