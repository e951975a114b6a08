"""The SDKs' retry count (``x-stainless-retry-count``), noted for the pipeline (``gateway.request.retries``):
a resent body is a retry of the call it repeats, not a new turn."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.request.retries import RETRY_HEADER, retry_count

MAX_COUNTED = 1000  # a larger number is noted as this


class RetryCount:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            retry_count.set(_retries(scope))
        await self.app(scope, receive, send)


def _retries(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == RETRY_HEADER and value.isdigit():
            return min(int(value), MAX_COUNTED)
    return 0
