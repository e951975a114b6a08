"""Calls held in flight and bodies sent slowly, for the per-token caps (gateway/boundary/token_caps.py).

At the ASGI level: an app whose calls wait on a gate, and requests driven through one middleware with a
receive the test controls. Against the gateway: the SDKs on a rollout token, and a raw socket to a served
gateway that sends only part of a body.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import httpx2
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from tests.asgi_calls import Recorded, http_scope
from tests.builders import gateway_settings
from tests.fake_engine import FakeEngine
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.http_calls import TIMEOUT_S

HI = [{"role": "user", "content": "hi"}]
Receive = Callable[[], Awaitable[dict]]


class GatedApp:
    """An ASGI app that reads the body, then waits for ``gate`` before answering 200 ``{}``."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.waiting = 0  # calls inside the app, waiting for the gate
        self.saw_disconnect = False

    async def __call__(self, scope, receive, send):
        while True:
            message = await receive()
            if message["type"] != "http.request":
                self.saw_disconnect = True
                raise RuntimeError("client disconnected")  # as Starlette's request.body() does
            if not message.get("more_body"):
                break
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def whole_body() -> Receive:
    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    return receive


def stalling_body(first: bytes = b'{"mo') -> Receive:
    """A body that sends ``first`` and then nothing more, ever."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": first, "more_body": True}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return receive


def trickling_body(pause_s: float) -> Receive:
    """A body that never ends, one byte every ``pause_s`` seconds."""

    async def receive():
        await asyncio.sleep(pause_s)
        return {"type": "http.request", "body": b" ", "more_body": True}

    return receive


async def through(middleware, path: str, headers: dict | None = None, receive: Receive | None = None) -> Recorded:
    """One request through ``middleware``: what it sent back."""
    recorded = Recorded()

    async def send(message):
        recorded.sent.append(message)

    await middleware(http_scope(path, headers), receive or whole_body(), send)
    return recorded


def header(recorded: Recorded, name: bytes) -> bytes | None:
    start = next(m for m in recorded.sent if m["type"] == "http.response.start")
    return next((v for n, v in start["headers"] if n == name), None)


@asynccontextmanager
async def capped_gateway(sqlite_db: str, fake: FakeEngine, engine_url: str, **caps) -> AsyncIterator[GatewayHarness]:
    """The in-process gateway with its per-token caps set (e.g. ``token_max_in_flight=4``)."""
    harness = start_gateway(gateway_settings(sqlite_db, engine_url, **caps), fake)
    gateway = await anext(harness)
    try:
        yield gateway
    finally:
        await anext(harness, None)


def openai_agent(gateway: GatewayHarness, base_url: str, api_key: str = "EMPTY") -> AsyncOpenAI:
    """An agent's OpenAI client: no admin key, no retries (a 429 reaches the test)."""
    return AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=gateway.agent, max_retries=0)


@asynccontextmanager
async def anthropic_agent(gateway: GatewayHarness, base_url: str) -> AsyncIterator[AsyncAnthropic]:
    """An agent's Anthropic client (it runs on httpx2), no retries; ``base_url`` a rollout's, ending in /v1."""
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(gateway.app), base_url="http://gateway") as http:
        yield AsyncAnthropic(base_url=base_url.removesuffix("/v1"), api_key="EMPTY", http_client=http, max_retries=0)


async def held_streams(client: AsyncOpenAI, count: int) -> list[asyncio.Task]:
    """``count`` streamed chat calls, each read to its end (they wait on the fake engine's stream gate)."""

    async def one() -> str:
        stream = await client.chat.completions.create(model="policy", messages=HI, stream=True)
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    return [asyncio.create_task(one()) for _ in range(count)]


def raw_exchange(url: str, head: str, body: bytes) -> tuple[int, dict, bytes]:
    """Send ``head`` and part of a body on one connection; read what comes back until the server closes.

    Returns the status, the headers (lower-case names) and the body of the answer."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as sock:
        sock.sendall(head.encode() + body)
        received = b""
        while chunk := sock.recv(65536):  # the server closes after its answer: that ends the loop
            received += chunk
    top, _, rest = received.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, rest


def post_head(path: str, declared: int, host: str = "127.0.0.1") -> str:
    headers = f"Host: {host}\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n"
    return f"POST {path} HTTP/1.1\r\n{headers}\r\n"


def error_json(body: bytes) -> dict:
    return json.loads(body)
