"""What every connection of the gateway is held to, below ASGI: its requests' heads in time, and its
rollout token's count of connections (uvicorn's httptools protocol, with a timer and a count).

A sandbox that reaches the gateway without our bridge (``serve --public-url``) could open connections and
send a head a byte a minute (slowloris), or hold hundreds of connections open. uvicorn times the gap
between requests (``timeout_keep_alive``) but not a head in progress, and an ASGI layer sees neither a
connection nor a head before it is in. Here:

- a connection gets ``header_timeout_s`` from its first byte (or from being accepted) to the end of each
  request's head; past it the gateway answers 408 and closes it, as a bridge does;
- a connection belongs to the rollout token of its first request that names one (the ``/r/<token>/``
  path, else on ``/v1/`` a rollout token as the API key, as ``gateway.boundary.token_caps`` reads it);
  a token holds at most ``max_connections`` at once, and one more is answered 429 and closed (a bridge's
  cap, per sandbox). A token's count goes when its last connection does.

A head names no token before it is in, so the head's time limit is per connection. What a connection
writes in one turn of the event loop leaves as one write (``gateway.boundary.write_batching``).
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.boundary.token_caps import RETRY_AFTER_S, request_token
from gateway.boundary.write_batching import BatchedWrites

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class OverCap(Exception):
    """A connection past its token's cap: raised from the parser's callback, answered 429."""


def too_many_connections(cap: int) -> bytes:
    """The 429 (OpenAI's error shape, as a bridge's: every dialect's client shows its message)."""
    message = f"this rollout token has {cap} connections open, the most one rollout may hold (token_max_connections)"
    error = {"message": message, "type": "rate_limit_error", "param": None, "code": "too_many_connections"}
    body = json.dumps({"error": error}).encode()
    head = (
        f"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"retry-after: {RETRY_AFTER_S}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def connection_token(url: bytes, headers: list[tuple[bytes, bytes]]) -> str | None:
    """The rollout token a request names, as the per-token caps read it; None for any other request."""
    return request_token(url.split(b"?", 1)[0].decode("latin-1"), headers)


def guarded(header_timeout_s: float, max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol whose heads are timed and whose tokens' connections are counted."""
    connections: dict[str, int] = {}  # token -> open connections, none at 0; one server's

    class Guarded(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None
        _token: str | None = None  # the token this connection counts against
        _refused = False

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(BatchedWrites(transport, self.loop))  # a response's head and body: one write
            self._arm()  # a connection that sends nothing at all is timed too

        def on_message_begin(self) -> None:
            self._arm()  # a new request on a kept-alive connection
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._disarm()
            if self._token is None and (token := connection_token(self.url, self.headers)) is not None:
                held = connections.get(token, 0)
                if held >= max_connections:
                    self._refused = True
                    raise OverCap(token)  # httptools raises it on as a parser error: send_400_response
                connections[token], self._token = held + 1, token
            super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            if not self._refused:
                return super().send_400_response(msg)
            self.transport.write(too_many_connections(max_connections))
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._token is not None:
                left = connections[self._token] - 1
                if left:
                    connections[self._token] = left
                else:
                    del connections[self._token]
                self._token = None
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
