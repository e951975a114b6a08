"""What every connection of the gateway is held to, below ASGI: its requests' heads in time and in size, what
is left of a body answered early, and its rollout token's count of connections (uvicorn's httptools
protocol, with timers and counts).

A sandbox that reaches the gateway without our bridge (``serve --public-url``) could open connections and
send a head a byte a minute (slowloris), send a head of a hundred MiB (parsed in one go, it stalls the
event loop for every connection), trickle a body nobody reads after its early answer, or hold hundreds of
connections open. uvicorn times the gap between requests (``timeout_keep_alive``) but none of those, and an
ASGI layer sees neither a connection nor a head before it is in. Here:

- a connection gets ``header_timeout_s`` from its first byte (or from being accepted) to the end of each
  request's head; past it the gateway answers 408 and closes it, as a bridge does;
- a head gets ``max_head_bytes``, counted as its bytes arrive, before the parser sees them: past it a 431
  and the connection closes (a head arriving right behind a body in one read may pass by that read);
- an answer that starts before its request's body was in (a 401, 404, 405 or 413 that reads no body) says
  ``connection: close`` (so no client sends its next request on a connection about to end) and ends the
  connection once it is out: the gateway closes its side, drops what arrives unparsed, and closes the whole
  of it when the client does or after ``LINGER_S`` (so the client reads the answer, not a reset);
- a connection counts against the rollout token of its latest request (the ``/r/<token>/`` path as the
  routes read it, percent-decoded, else on ``/v1/`` a rollout token as the API key, as
  ``gateway.boundary.token_caps`` reads it), so a connection opened under a made-up token carries a real
  one only within that one's count; a token holds at most ``token_max_connections`` at once, and a
  request that would make one more is answered 429 and its connection closed (a bridge's cap, per
  sandbox). A token's count goes when its last connection does, or names another.

A head names no token before it is in, so the head's limits are per connection. What a connection
writes in one turn of the event loop leaves as one write (``gateway.boundary.write_batching``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from urllib.parse import unquote

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.boundary.token_caps import RETRY_AFTER_S, request_token
from gateway.boundary.write_batching import BatchedWrites
from gateway.dialects import ROLLOUT_PREFIX
from gateway.settings import GatewaySettings

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
LINGER_S = 5.0  # seconds an answered connection's leftovers are dropped before it closes (nginx's lingering_timeout)
PATH_TOKEN = ROLLOUT_PREFIX.encode()
CONNECTION_CLOSE = (b"connection", b"close")


class LingeringClose:
    """A request's transport whose close lingers (``Guarded._linger``): its answer went out before its body
    was in, and the client may still be sending it."""

    def __init__(self, transport: asyncio.Transport, linger: Callable[[], None]):
        self._transport, self.close = transport, linger

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class OverCap(Exception):
    """A request past its token's cap of connections: raised from the parser's callback, answered 429."""


def refusal(status: str, message: str, code: str, kind: str, extra: str = "") -> bytes:
    """A whole answer of the connection's own, closing it, in OpenAI's error shape (as a bridge's: every
    dialect's client shows its message; a head that is not in yet names no dialect)."""
    error = {"message": message, "type": kind, "param": None, "code": code}
    body = json.dumps({"error": error}).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: close\r\n\r\n"
    )
    return head.encode() + body


def too_many_connections(cap: int) -> bytes:
    message = f"this rollout token has {cap} connections open, the most one rollout may hold (token_max_connections)"
    return refusal(
        "429 Too Many Requests",
        message,
        "too_many_connections",
        "rate_limit_error",
        f"retry-after: {RETRY_AFTER_S}\r\n",
    )


def head_too_large(cap: int) -> bytes:
    message = (
        f"the request's line and headers take more than {cap} bytes, the most this gateway reads "
        f"(serve --max-head-kib); send shorter headers"
    )
    return refusal("431 Request Header Fields Too Large", message, "head_too_large", "invalid_request_error")


def connection_token(url: bytes, headers: list[tuple[bytes, bytes]]) -> str | None:
    """The rollout token a request names, as the per-token caps and the routes read it (the path
    percent-decoded as uvicorn decodes it: ``/r/%68rl-x/`` is ``hrl-x``'s); None for any other request."""
    path = httptools.parse_url(url).path.decode("latin-1")
    if "%" in path:
        path = unquote(path)
    return request_token(path, headers)


def path_prefix(url: bytes) -> bytes | None:
    """A ``/r/<token>/`` request target's raw prefix through the token's slash: any target that starts with
    it decodes to the same token (a percent triplet never spans a slash), so it is not read again."""
    if not url.startswith(PATH_TOKEN):
        return None
    end = url.find(b"/", len(PATH_TOKEN))
    return url[: end + 1] if end > len(PATH_TOKEN) else None


def guarded(settings: GatewaySettings) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol held to ``settings``' connection limits (the class one server uses)."""
    header_timeout_s, max_connections = settings.header_timeout_s, settings.token_max_connections
    max_head_bytes, linger_s = settings.max_head_bytes, min(LINGER_S, settings.header_timeout_s)
    connections: dict[str, int] = {}  # token -> connections whose latest request names it, none at 0

    class Guarded(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head_left: int | None = max_head_bytes  # bytes the head in progress may still take; None: a head ended
        _token: str | None = None  # the token this connection counts against
        _prefix: bytes | None = None  # the raw ``/r/<token>/`` of the request that named it, if it was a path
        _refused = False
        _lingering: asyncio.TimerHandle | None = None  # answered early: the timer that ends the connection

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(BatchedWrites(transport, self.loop))  # a response's head and body: one write
            self._arm()  # a connection that sends nothing at all is timed too

        def data_received(self, data: bytes) -> None:
            if self._lingering is not None:
                return  # what is left of a body answered early: dropped, never parsed
            left = self._head_left
            if left is None:  # after a head: its body, until the parser has it all (no callback of ours: cheaper)
                cycle = self.cycle
                if cycle is not None and cycle.more_body:
                    return super().data_received(data)
                left = max_head_bytes  # the request is in: what comes is the next head
            if len(data) <= left:
                self._head_left = left - len(data)  # before parsing: on_headers_complete ends the count
                super().data_received(data)
            else:
                self._past_head_room(data, left)

        def _past_head_room(self, data: bytes, left: int) -> None:
            """``data`` holds more than the head's room: each head in it must end within its room, else a 431."""
            while len(data) > left:
                self._head_left = 0
                super().data_received(data[:left])
                data = data[left:]
                if self.transport.is_closing() or self._lingering is not None:
                    return
                if self._head_left == 0:  # the head goes on past its cap
                    self.transport.write(head_too_large(max_head_bytes))
                    return self._linger()
                cycle = self.cycle  # the head ended
                if cycle is not None and cycle.more_body:
                    break  # its body follows
                left = max_head_bytes  # the next request's head follows
            if data:
                self.data_received(data)

        def on_message_begin(self) -> None:
            self._arm()  # a new request on a kept-alive connection
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._disarm()
            self._head_left = None  # what follows is a body
            if self._prefix is None or not self.url.startswith(self._prefix):  # else: the same token's path
                self._bind(connection_token(self.url, self.headers))
            super().on_headers_complete()
            self._close_if_answered_early(self.cycle)

        def _close_if_answered_early(self, cycle: RequestResponseCycle) -> None:
            """An answer to ``cycle`` that starts before its body is all in says ``connection: close``
            (uvicorn then closes once it is out), and that close lingers."""
            send = cycle.send

            async def send_closing(message) -> None:
                if message["type"] == "http.response.start" and cycle.more_body:
                    cycle.transport = LingeringClose(cycle.transport, self._linger)
                    message = {**message, "headers": [*message.get("headers", ()), CONNECTION_CLOSE]}
                await send(message)

            cycle.send = send_closing

        def _bind(self, token: str | None) -> None:
            """Count this connection against ``token`` (None: against none); raises OverCap past its cap."""
            if token != self._token:
                self._release()
                if token is not None:
                    held = connections.get(token, 0)
                    if held >= max_connections:
                        self._refused = True
                        raise OverCap(token)  # httptools raises it on as a parser error: send_400_response
                    connections[token], self._token = held + 1, token
            self._prefix = None if token is None else path_prefix(self.url)

        def _release(self) -> None:
            if self._token is not None:
                left = connections[self._token] - 1
                if left:
                    connections[self._token] = left
                else:
                    del connections[self._token]
                self._token = self._prefix = None

        def send_400_response(self, msg: str) -> None:
            if not self._refused:
                return super().send_400_response(msg)
            self.transport.write(too_many_connections(max_connections))
            self.transport.close()

        def _linger(self) -> None:
            """End the connection after an answer: our side closes now, what arrives is dropped, and the
            connection closes when the client's side does (eof_received) or after ``linger_s``."""
            self._disarm()
            self._unset_keepalive_if_required()
            if not self.transport.can_write_eof():  # TLS: no half close
                return self.transport.close()
            self.transport.write_eof()
            self._lingering = self.loop.call_later(linger_s, self.transport.close)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._lingering is not None:
                self._lingering.cancel()
            self._release()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _timed_out(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.write(TIMED_OUT)
                self.transport.close()

    Guarded.connections = connections  # for tests and metrics: what the server holds now
    return Guarded
