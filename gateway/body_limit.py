"""The gateway's one ASGI boundary: who may call, how big a body may be, and no traceback ever leaves.

One layer on every request, cheap on the hot path (a model call pays a few attribute reads):

- **Guard.** The Host header must name this gateway (DNS rebinding), and a path under ``/api`` or
  ``/admin`` (the control plane) needs the admin key (``gateway.identity``). Decided on the raw path,
  which is what routing matches: a route added under those prefixes is covered without naming it.
- **Body limit**, enforced while the body streams in. A declared ``Content-Length`` over the limit is
  refused before the app runs; a chunked (or lying) body is counted message by message, and the
  first ``http.request`` that takes it over the limit is never handed on. The app then sees a
  disconnect, whatever it sends is dropped, and the client gets a 413 in its dialect's shape. So the
  process holds at most the limit plus one chunk of any body.
- **Retries.** The SDKs' retry count (``x-stainless-retry-count``) is noted for the pipeline
  (``gateway.retries``).
- **Server errors.** An exception the handlers did not map becomes a 500 naming an error id; the body
  carries the id and no exception text (that may hold a secret or a path), the log holds the
  traceback once under the same id. After the response started, the id is only logged. A store that
  fails for a while (locked by another process, disk full) is a 503 with Retry-After instead
  (``gateway.errors.failure_of``).
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import GatewayError, PayloadTooLarge, count_failure, error_response, failure_of
from gateway.identity import require_admin, require_served_host
from gateway.retries import RETRY_HEADER, retry_count

logger = logging.getLogger(__name__)

CONTROL_PLANE = ("/api", "/admin")  # path prefixes that need the admin key, reads and writes alike


def too_large(size: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body of {size} bytes exceeds the limit of {max_bytes} bytes; send a "
        f"smaller body (the gateway's max_body_bytes setting)"
    )


def is_control_plane(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in CONTROL_PLANE)


class _Exchange:
    """One request's receive and send, counting the body and noting whether the response started."""

    __slots__ = ("_receive", "_send", "max_bytes", "counted", "tripped", "started")

    def __init__(self, receive: Receive, send: Send, max_bytes: int):
        self._receive, self._send, self.max_bytes = receive, send, max_bytes
        self.counted, self.tripped, self.started = 0, False, False

    async def receive(self) -> Message:
        if self.tripped:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.counted += len(message.get("body", b""))
            if self.counted > self.max_bytes:
                self.tripped = True  # this chunk stops here: the app sees the client go away
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.tripped and not self.started:
            return  # the app's reaction to the cut body; the client gets the 413 instead
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


class Boundary:
    """The ASGI layer around the app; ``state`` gives the admin key and the served Host names."""

    def __init__(self, app: ASGIApp, max_bytes: int, admin_key: str, served_hosts: frozenset[str]):
        self.app, self.max_bytes = app, max_bytes
        self.admin_key, self.served_hosts = admin_key, served_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            self._guard(scope)
        except GatewayError as exc:
            return await self._refuse(scope, receive, send, exc)
        declared, retried = _read_headers(scope)
        retry_count.set(retried)
        if declared is not None and declared > self.max_bytes:
            return await self._refuse(scope, receive, send, too_large(str(declared), self.max_bytes))
        exchange = _Exchange(receive, send, self.max_bytes)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except ClientDisconnect:
            logger.debug("client went away during %s %s", scope.get("method"), scope.get("path"))
        except Exception as exc:
            if not exchange.tripped or exchange.started:
                return await self._server_error(scope, receive, send, exchange.started, exc)
        if exchange.tripped and not exchange.started:
            await self._refuse(
                scope, receive, send, too_large(f"more than {self.max_bytes}", self.max_bytes), close=True
            )

    def _guard(self, scope: Scope) -> None:
        request = Request(scope)
        require_served_host(request, self.served_hosts)
        if is_control_plane(scope.get("path", "")):
            require_admin(request, self.admin_key)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, error: GatewayError, close: bool = False
    ) -> None:
        path = scope.get("path", "")
        if "app" in scope:
            count_failure(scope["app"], path, error)
        response = error_response(path, error)
        if close or isinstance(error, PayloadTooLarge):
            response.headers["connection"] = "close"  # the rest of the body is not read
        await response(scope, receive, send)

    async def _server_error(self, scope: Scope, receive: Receive, send: Send, started: bool, exc: Exception) -> None:
        error = failure_of(exc, f"{scope.get('method')} {scope.get('path', '')}")
        if not started:
            await self._refuse(scope, receive, send, error)


def _read_headers(scope: Scope) -> tuple[int | None, int]:
    """The declared body length (None: not declared or not a number) and the SDK's retry count."""
    length, retried = None, 0
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            length = int(value) if value.isdigit() else None
        elif name == RETRY_HEADER and value.isdigit():
            retried = min(int(value), 1000)
    return length, retried
