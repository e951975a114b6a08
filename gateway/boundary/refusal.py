"""Answering a request the boundary refuses: the error in its endpoint's dialect, counted once."""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from gateway.errors import GatewayError, PayloadTooLarge, count_failure, error_response


async def refuse(scope: Scope, receive: Receive, send: Send, error: GatewayError, close: bool = False) -> None:
    """Send ``error`` in the dialect of the request's path; ``close``: the rest of the body is not read."""
    path = scope.get("path", "")
    if "app" in scope:
        count_failure(scope["app"], path, error)
    response = error_response(path, error)
    if close or isinstance(error, PayloadTooLarge):
        response.headers["connection"] = "close"
    await response(scope, receive, send)
