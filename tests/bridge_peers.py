"""The two sides a sandbox bridge sits between, for tests: a recording upstream and a raw client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import uvicorn


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    query: bytes
    headers: dict[str, str]
    body: bytes
    client: tuple[str, int]


class RecordingUpstream:
    """An ASGI app that records every request; a streaming chat request holds its second event
    until `release` is set (so a test can tell a stream from a buffered reply)."""

    def __init__(self) -> None:
        self.requests: list[SeenRequest] = []
        self.release = asyncio.Event()
        self.port = 0

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append(
            SeenRequest(
                scope["method"],
                scope["raw_path"].decode(),
                scope["query_string"],
                headers,
                body,
                tuple(scope["client"]),
            )
        )
        if body == b'{"stream":true}':
            await self._stream(send)
            return
        reply = json.dumps({"path": scope["path"], "bytes": len(body)}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))],
            }
        )
        await send({"type": "http.response.body", "body": reply})

    async def _stream(self, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        await asyncio.wait_for(self.release.wait(), 300)  # a guard: the test releases it, however busy
        await send({"type": "http.response.body", "body": b"data: second\n\ndata: [DONE]\n\n"})


@contextlib.asynccontextmanager
async def running_upstream(app) -> AsyncIterator[int]:
    """Serve app with uvicorn in this event loop on a free loopback port; yields the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def recording_upstream() -> AsyncIterator[RecordingUpstream]:
    """A RecordingUpstream served on a free loopback port (its ``port`` set)."""
    recorder = RecordingUpstream()
    async with running_upstream(recorder) as port:
        recorder.port = port
        yield recorder


def raw_request(method: str, target: str, host: str = "127.0.0.1:8000", extra: bytes = b"", body: bytes = b"") -> bytes:
    length = b"content-length: %d\r\n" % len(body) if body else b""
    return f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n".encode() + extra + length + b"\r\n" + body


async def raw_exchange(socket_path: str, data: bytes, timeout_s: float = 60) -> list[tuple[int, bytes]]:
    """Send raw bytes to a unix socket, read until the other side closes; (status, body) of each reply."""
    reader, writer = await asyncio.open_unix_connection(socket_path)
    writer.write(data)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), timeout_s)
    writer.close()
    return parse_replies(raw)


def parse_replies(raw: bytes) -> list[tuple[int, bytes]]:
    """Content-Length framed HTTP/1.1 replies, one after another (what the bridge sends here)."""
    replies = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(headers.get(b"content-length", len(rest)))
        replies.append((int(lines[0].split()[1]), rest[:length]))
        raw = rest[length:]
    return replies
