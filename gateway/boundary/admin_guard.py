"""The control plane (every path under ``/api`` or ``/admin``, reads and writes alike) needs the admin
key (``gateway.request.identity.require_admin``). Decided on the raw path, which is what routing matches: a route
added under those prefixes is covered without naming it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.boundary.refusal import refuse
from gateway.errors import GatewayError
from gateway.request.identity import require_admin

CONTROL_PLANE = ("/api", "/admin")  # path prefixes that need the admin key


def is_control_plane(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in CONTROL_PLANE)


class AdminGuard:
    def __init__(self, app: ASGIApp, admin_key: str):
        self.app, self.admin_key = app, admin_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_control_plane(scope.get("path", "")):
            try:
                require_admin(Request(scope), self.admin_key)
            except GatewayError as exc:
                return await refuse(scope, receive, send, exc)
        await self.app(scope, receive, send)
