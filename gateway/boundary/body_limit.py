"""The body limit, enforced while the body streams in.

A declared ``Content-Length`` over the limit is refused before the app runs; a chunked (or lying) body
is counted message by message, and the first ``http.request`` that takes it over the limit is never
handed on. The app then sees a disconnect, whatever it sends is dropped, and the client gets a 413 in
its dialect's shape. So the process holds at most the limit plus one chunk of any body.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.boundary.refusal import refuse
from gateway.errors import PayloadTooLarge


def too_large(size: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body of {size} bytes exceeds the limit of {max_bytes} bytes; send a "
        f"smaller body (the gateway's max_body_bytes setting)"
    )


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            return await refuse(scope, receive, send, too_large(str(declared), self.max_bytes))
        exchange = _Exchange(receive, send, self.max_bytes)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception:
            if not exchange.tripped or exchange.started:
                raise  # not the cut body's doing: ServerErrors answers it
        if exchange.tripped and not exchange.started:
            await refuse(scope, receive, send, too_large(f"more than {self.max_bytes}", self.max_bytes), close=True)


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


def _declared_length(scope: Scope) -> int | None:
    """The declared body length (None: not declared or not a number)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None
