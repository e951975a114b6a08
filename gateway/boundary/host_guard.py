"""The Host header must name this gateway: a page a browser loaded from elsewhere cannot reach it by
re-pointing its own name at 127.0.0.1 (DNS rebinding). 421 in the endpoint's dialect
(``gateway.request.identity.require_served_host``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.boundary.refusal import refuse
from gateway.errors import GatewayError
from gateway.request.identity import require_served_host


class HostGuard:
    def __init__(self, app: ASGIApp, served_hosts: frozenset[str]):
        self.app, self.served_hosts = app, served_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                require_served_host(Request(scope), self.served_hosts)
            except GatewayError as exc:
                return await refuse(scope, receive, send, exc)
        await self.app(scope, receive, send)
