"""The engine's answered (not streamed) calls over kept-alive HTTP/1.1 connections: asyncio and httptools.

aiohttp's client spends about 0.1 ms of CPU a request beyond the socket's own work (request and response
objects, timers, header merging, cookie and redirect handling), a tenth of what recording a call costs
the gateway, and as much again in latency one agent at a time. A chat or completions call that is not
streamed needs none of it: one POST of a JSON body, one answer. Here each connection is an asyncio
protocol whose parser (httptools, the one uvicorn serves with) hands back the status and the body;
idle connections are kept ``KEEPALIVE_S`` and reused, newest first. A streamed answer is handed over
once its head is in (``LeanStream``): its body as it comes, each read waiting at most the engine timeout
for the next bytes; closed before its end, the connection is dropped and the engine aborts the request.
Health checks, listings and adapter loads stay on aiohttp; ``gateway.engine.client`` owns the retries
and the errors.
"""

from __future__ import annotations

import asyncio
import time

import httptools
from yarl import URL

CONNECT_TIMEOUT_S = 5.0  # as the aiohttp client's sock_connect


class Dropped(ConnectionError):
    """The connection failed or closed before any of the answer came: the request never got an answer
    from a working engine (a kept-alive connection the engine closed while idle looks like this)."""


class BrokenAnswer(ConnectionError):
    """The connection closed, or the engine wrote something that is not HTTP, in the middle of an answer."""


class _Connection(asyncio.Protocol):
    """One connection to the engine: one request at a time, its answer read by httptools."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future | None = None  # the answer (status, body), or a stream's head (status, None)
        self.body: list[bytes] = []
        self.answering = False  # a byte of the current answer came
        self.idle_since = 0.0  # time.monotonic() when it was given back
        # a streamed answer: its body is read as it comes once its head is in (a 4xx/5xx is read whole)
        self.streaming = False
        self.complete = False  # the current answer's last byte came
        self.readable: asyncio.Future | None = None  # a reader waiting for body bytes
        self.failure: Exception | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def send(self, request: bytes, streaming: bool = False) -> asyncio.Future:
        self.waiter, self.answering, self.body = self.loop.create_future(), False, []
        self.streaming, self.complete, self.failure = streaming, False, None
        self.transport.write(request)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.answering = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BrokenAnswer(f"the engine's answer is not HTTP ({exc})"))
            self.transport.close()

    def on_headers_complete(self) -> None:  # httptools' callback
        if self.streaming and self.parser.get_status_code() < 400:
            waiter, self.waiter = self.waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result((self.parser.get_status_code(), None))

    def on_body(self, body: bytes) -> None:  # httptools' callback
        self.body.append(body)
        self._wake()

    def on_message_complete(self) -> None:  # httptools' callback
        waiter, self.waiter = self.waiter, None
        self.complete = True
        if not self.parser.should_keep_alive():
            self.transport.close()
        if waiter is not None and not waiter.done():
            waiter.set_result((self.parser.get_status_code(), b"".join(self.body)))
        self._wake()

    def _wake(self) -> None:
        if self.readable is not None and not self.readable.done():
            self.readable.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answering:
            self._fail(BrokenAnswer("the engine closed the connection in the middle of its answer"))
        else:
            self._fail(Dropped("the engine closed the connection before answering"))

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        elif self.streaming and not self.complete:
            self.failure = exc
            self._wake()

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()


class Http1Pool:
    """POSTs to one engine (``http://host:port[/prefix]``) on reused connections."""

    def __init__(self, base_url: str, timeout_s: float, keepalive_s: float):
        url = URL(base_url)
        self.host, self.port, self.prefix = url.host, url.port, url.path.rstrip("/")
        self.timeout_s, self.keepalive_s = timeout_s, keepalive_s
        self._heads: dict[str, bytes] = {}  # path -> the request line and the fixed headers
        self._idle: list[_Connection] = []

    @staticmethod
    def serves(base_url: str) -> bool:
        """Plain HTTP with a host and port (TLS and anything else stay with aiohttp)."""
        url = URL(base_url)
        return url.scheme == "http" and bool(url.host) and url.port is not None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """The status and body of the engine's answer; ``Dropped`` when it never began (safe to retry),
        ``BrokenAnswer`` when it broke off, ``TimeoutError`` past ``timeout_s`` (the connection is closed:
        the engine aborts the request)."""
        connection, status, answer = await self._sent(path, body, streaming=False)
        self.give_back(connection)
        return status, answer

    async def stream(self, path: str, body: bytes) -> tuple[int, LeanStream | bytes]:
        """The status once the answer's head is in, with the stream of its body; an answer of 400 or more
        comes whole (its bytes), as ``post``'s."""
        connection, status, answer = await self._sent(path, body, streaming=True)
        if answer is None:
            return status, LeanStream(connection, self)
        self.give_back(connection)
        return status, answer

    async def _sent(self, path: str, body: bytes, streaming: bool) -> tuple[_Connection, int, bytes | None]:
        """The request sent on a kept or new connection, and the answer (its head alone when streaming)."""
        connection = self._reused() or await self._opened()
        try:
            async with asyncio.timeout(self.timeout_s):
                status, answer = await connection.send(self._head(path, len(body)) + body, streaming)
        except BaseException:
            if connection.transport is not None:
                connection.transport.close()
            raise
        return connection, status, answer

    def give_back(self, connection: _Connection) -> None:
        """An answered connection, kept for the next request when the engine keeps it open."""
        if connection.usable:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)

    def close(self) -> None:
        for connection in self._idle:
            connection.transport.close()
        self._idle.clear()

    def _reused(self) -> _Connection | None:
        fresh_after = time.monotonic() - self.keepalive_s
        while self._idle:
            connection = self._idle.pop()
            if connection.usable and connection.idle_since > fresh_after:
                return connection
            connection.transport.close()  # past the keep-alive: the engine may be closing it
        return None

    async def _opened(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, connection = await loop.create_connection(lambda: _Connection(loop), self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise Dropped(f"cannot connect to the engine ({type(exc).__name__})") from exc
        return connection

    def _head(self, path: str, length: int) -> bytes:
        head = self._heads.get(path)
        if head is None:
            head = self._heads[path] = (
                f"POST {self.prefix}{path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                "content-type: application/json\r\naccept: application/json\r\n"
            ).encode()
        return head + b"content-length: %d\r\n\r\n" % length


class LeanStream:
    """A streamed answer's body on one connection, read as it comes (``EngineStream`` parses its events)."""

    def __init__(self, connection: _Connection, pool: Http1Pool):
        self._connection, self._pool = connection, pool
        self._done = False  # released or closed

    async def readany(self) -> bytes:
        """The body bytes that came since the last read, waiting for some; b"" at the end. ``TimeoutError``
        when none came within the engine timeout, ``BrokenAnswer`` when the answer broke off."""
        connection = self._connection
        while not connection.body:
            if connection.failure is not None:
                raise connection.failure
            if connection.complete:
                return b""
            connection.readable = connection.loop.create_future()
            try:
                async with asyncio.timeout(self._pool.timeout_s):
                    await connection.readable
            finally:
                connection.readable = None
        data = connection.body[0] if len(connection.body) == 1 else b"".join(connection.body)
        connection.body = []
        return data

    def at_eof(self) -> bool:
        return self._connection.complete and not self._connection.body

    def release(self) -> None:
        """Read to its end: the connection goes back to the pool."""
        if not self._done:
            self._done = True
            self._pool.give_back(self._connection)

    def close(self) -> None:
        """Closed before its end: the connection is dropped (the engine aborts the request)."""
        if not self._done:
            self._done = True
            self._connection.transport.close()
