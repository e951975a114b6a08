"""One agent cannot starve the others through its bridge: caps per sandbox, timeouts on the request side.

Two bridges (two sandboxes) in front of one recording upstream, as in the runner. Timeouts are made
small through `BridgeLimits`; tests wait for the condition (a reply, a close) and never time it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from sandboxes.bridge import HostBridge
from sandboxes.bridge_limits import BridgeLimits
from sandboxes.route import Route
from tests.bridge_peers import parse_replies, raw_request, recording_upstream

MINE, THEIRS = "/r/hrl-mine/v1", "/r/hrl-theirs/v1"
HOST = "127.0.0.1:8000"
GUARD_S = 60  # only against a hang: every wait below ends on a condition
SLOW_BODY = raw_request("POST", f"{MINE}/chat/completions", extra=b"content-length: 1000000\r\n") + b'{"model":'
LONG = 3600.0  # seconds: a timeout a test does not exercise


@pytest.fixture
async def upstream():
    async with recording_upstream() as recorder:
        yield recorder


@pytest.fixture
async def bridges(upstream, tmp_path):
    """Start bridges for given limits (mine by default); closed at the end."""
    started: list[HostBridge] = []

    async def start(limits: BridgeLimits, prefix: str = MINE) -> HostBridge:
        route = Route.for_gateway(f"http://127.0.0.1:{upstream.port}{prefix}", port_inside=8000)
        bridge = await HostBridge(str(tmp_path / f"gw{len(started)}.sock"), route, limits).start()
        started.append(bridge)
        return bridge

    yield start
    for bridge in started:
        await bridge.close()


def limits(**changes) -> BridgeLimits:
    """Limits whose timeouts stay out of the way unless a test lowers one."""
    base = {"header_timeout_s": LONG, "body_read_timeout_s": LONG, "body_timeout_s": LONG, "idle_timeout_s": LONG}
    return BridgeLimits(**{**base, **changes})


async def until(condition, what: str) -> None:
    async with asyncio.timeout(GUARD_S):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def reply_then_close(bridge: HostBridge, data: bytes) -> bytes:
    """Send data, then everything the bridge sends until it closes the connection."""
    reader, writer = await asyncio.open_unix_connection(bridge.socket_path)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), GUARD_S)
    finally:
        writer.close()


async def hold(bridge: HostBridge, data: bytes, count: int) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_unix_connection(bridge.socket_path)
        writer.write(data)
        await writer.drain()
        writers.append(writer)
    return writers


async def release(bridge: HostBridge, writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()
    await until(lambda: bridge.load.connections == 0 and bridge.load.in_flight == 0, "connections released")


def refusal(raw: bytes) -> tuple[int, dict]:
    [(status, body)] = parse_replies(raw)
    return status, json.loads(body)["error"]


async def test_a_flood_over_the_connection_cap_gets_429_while_the_neighbours_bridge_answers_200(bridges, upstream):
    flooded, neighbour = await bridges(limits(max_connections=4)), await bridges(limits(max_connections=4), THEIRS)
    flood = await hold(flooded, SLOW_BODY, 4)
    await until(lambda: flooded.load.connections == 4, "the flood holds the cap")

    raw = await reply_then_close(flooded, raw_request("GET", f"{MINE}/models"))
    status, error = refusal(raw)
    assert status == 429 and error["code"] == "sandbox_bridge_busy" and "connections" in error["message"]
    assert b"\r\nretry-after: 1\r\n" in raw.lower()

    transport = httpx.AsyncHTTPTransport(uds=neighbour.socket_path)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{HOST}", timeout=GUARD_S) as http:
        for _ in range(8):  # more than the cap, on the neighbour's own bridge
            assert (await http.post(f"{THEIRS}/chat/completions", json={})).status_code == 200

    await release(flooded, flood)
    last = raw_request("GET", f"{MINE}/models", extra=b"connection: close\r\n")
    [(status, _)] = parse_replies(await reply_then_close(flooded, last))
    assert status == 200  # the cap frees as the flood ends
    assert [r.path for r in upstream.requests].count(f"{THEIRS}/chat/completions") == 8


async def test_requests_over_the_in_flight_cap_get_429(bridges):
    bridge = await bridges(limits(max_in_flight=2))
    stalled = await hold(bridge, SLOW_BODY, 2)
    await until(lambda: bridge.load.in_flight == 2, "two requests in flight")
    status, error = refusal(await reply_then_close(bridge, raw_request("GET", f"{MINE}/models")))
    assert status == 429 and "in flight" in error["message"]
    await release(bridge, stalled)


async def test_a_bridge_that_refused_too_often_waits_while_its_neighbour_answers(bridges):
    flooded, neighbour = await bridges(limits(refusals_per_s=1)), await bridges(limits(), THEIRS)
    [(status, _)] = parse_replies(await reply_then_close(flooded, raw_request("GET", "/api/runs")))
    assert status == 403 and flooded.load.refusals_wait_s() > 0  # its budget is spent: not accepting
    last = raw_request("GET", f"{THEIRS}/models", extra=b"connection: close\r\n")
    [(status, _)] = parse_replies(await reply_then_close(neighbour, last))
    assert status == 200
    [(status, _)] = parse_replies(await reply_then_close(flooded, raw_request("GET", "/api/runs")))
    assert status == 403  # answered again once its budget refilled


async def test_a_slow_header_gets_408_after_the_header_timeout(bridges, upstream):
    bridge = await bridges(limits(header_timeout_s=0.2))
    status, error = refusal(await reply_then_close(bridge, f"POST {MINE}/chat/completions HTTP/1.1\r\nho".encode()))
    assert status == 408 and error["code"] == "sandbox_request_timeout" and "headers" in error["message"]
    assert upstream.requests == []
    await until(lambda: bridge.load.connections == 0, "the connection closed")


async def test_a_stalled_body_gets_408_after_the_body_read_timeout(bridges):
    bridge = await bridges(limits(body_read_timeout_s=0.2))
    status, error = refusal(await reply_then_close(bridge, SLOW_BODY))  # 9 of 1,000,000 bytes
    assert status == 408 and "stalled" in error["message"]
    await until(lambda: bridge.load.in_flight == 0 and bridge.load.connections == 0, "the request ended")


async def test_a_trickling_body_gets_408_after_the_total_body_timeout(bridges):
    bridge = await bridges(limits(body_timeout_s=0.3))
    reader, writer = await asyncio.open_unix_connection(bridge.socket_path)
    writer.write(SLOW_BODY)

    async def trickle() -> None:  # a byte at a time, each well within the per-read timeout
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.02)

    dripping = asyncio.ensure_future(trickle())
    try:
        status, error = refusal(await asyncio.wait_for(reader.read(), GUARD_S))
    finally:
        dripping.cancel()
        writer.close()
    assert status == 408 and "did not arrive within" in error["message"]


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(bridges):
    bridge = await bridges(limits(idle_timeout_s=0.2))
    reader, writer = await asyncio.open_unix_connection(bridge.socket_path)
    try:
        for _ in range(2):  # kept alive between requests that come promptly
            writer.write(raw_request("GET", f"{MINE}/models"))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD_S)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        assert await asyncio.wait_for(reader.read(), GUARD_S) == b""  # then closed, without a reply
    finally:
        writer.close()
    await until(lambda: bridge.load.connections == 0, "the connection closed")


async def test_a_streaming_response_outlives_every_request_timeout(bridges, upstream):
    bridge = await bridges(
        BridgeLimits(header_timeout_s=0.05, body_read_timeout_s=0.05, body_timeout_s=0.05, idle_timeout_s=0.05)
    )
    transport = httpx.AsyncHTTPTransport(uds=bridge.socket_path)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{HOST}", timeout=GUARD_S) as http:
        async with http.stream("POST", f"{MINE}/chat/completions", json={"stream": True}) as reply:
            chunks = reply.aiter_raw()
            assert b"data: first" in await anext(chunks)
            await asyncio.sleep(0.5)  # the model "generates" for ten times every timeout above
            upstream.release.set()
            rest = b"".join([chunk async for chunk in chunks])
    assert b"data: [DONE]" in rest


FD_PROBE = """
import resource
from sandboxes.bridge_limits import raise_open_files_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
print(raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_the_open_files_limit_is_raised_to_the_hard_limit():
    probe = subprocess.run([sys.executable, "-c", FD_PROBE], capture_output=True, text=True, check=True)
    reported, soft, hard = (int(n) for n in probe.stdout.split())
    assert reported == soft
    assert soft == hard or (hard == resource.RLIM_INFINITY and soft > 256)


def test_harnessrl_run_reports_its_file_descriptors(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    result = CliRunner().invoke(
        app,
        ["run", "--tasks", str(tmp_path / "none"), "--run", "r", "--gateway", "http://127.0.0.1:9", "--admin-key", "k"],
    )
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert f"file descriptors: {soft}" in result.output
