"""Each request's head within a time limit, on every connection: uvicorn's HTTP protocol with a timer.

A sandbox that reaches the gateway without our bridge (``serve --public-url``) could open connections and
send a request line and headers a byte a minute (slowloris): uvicorn times the gap between requests
(``timeout_keep_alive``) but not a head in progress, and an ASGI layer sees a request only once its head
is in. Here a connection gets ``header_timeout_s`` from its first byte (or from being accepted) to the
end of its head; past it the gateway answers 408 and closes it, as a bridge does. A head names no token
before it is complete, so this limit is per connection, not per rollout token.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def head_timed(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol whose requests' heads must arrive within ``header_timeout_s``."""

    class HeadTimed(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that sends nothing at all is timed too

        def on_message_begin(self) -> None:
            self._arm()  # a new request on a kept-alive connection
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
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

    return HeadTimed
