"""The request body limit, enforced while the body streams in, on every route.

An ASGI middleware: a declared ``Content-Length`` over the limit is refused before the app runs; a
chunked (or lying) body is counted message by message, and the first ``http.request`` that takes it
over the limit is never handed on. The app then sees a disconnect, whatever it sends is dropped, and
the client gets a 413 in its dialect's shape. So the process holds at most the limit plus one chunk
of any body.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import PayloadTooLarge, count_failure, error_response


def too_large(size: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body of {size} bytes exceeds the limit of {max_bytes} bytes; send a "
                           f"smaller body (the gateway's max_body_bytes setting)")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            return await self._refuse(scope, receive, send, too_large(str(declared), self.max_bytes))
        counted, tripped, app_started = 0, False, False

        async def counting_receive() -> Message:
            nonlocal counted, tripped
            if tripped:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                counted += len(message.get("body", b""))
                if counted > self.max_bytes:
                    tripped = True  # this chunk stops here: the app sees the client go away
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal app_started
            if tripped and not app_started:
                return  # the app's reaction to the cut body; the client gets the 413 instead
            app_started = app_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not tripped or app_started:
                raise
        if tripped and not app_started:
            await self._refuse(scope, receive, send, too_large(f"more than {self.max_bytes}", self.max_bytes))

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, error: PayloadTooLarge) -> None:
        path = scope.get("path", "")
        if "app" in scope:
            count_failure(scope["app"], path, error)
        response = error_response(path, error)
        response.headers["connection"] = "close"  # the rest of the body is not read
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None
