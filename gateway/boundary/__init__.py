"""The gateway's ASGI boundary: what every request passes before a route sees it, one middleware per job.

Outermost first (``install_boundary``):

1. ``ServerErrors``: an exception no handler mapped becomes a 500 naming an error id (a store failing
   for a while, a 503 with Retry-After); no exception text ever leaves.
2. ``HostGuard``: the Host header must name this gateway (DNS rebinding).
3. ``AdminGuard``: a path under ``/api`` or ``/admin`` (the control plane) needs the admin key.
4. ``BodyLimit``: a body over the limit is refused while it streams in (413 in the dialect's shape).
5. ``RetryCount``: the SDKs' retry count header, noted for the pipeline (``gateway.request.retries``).

Each is plain ASGI (no ``BaseHTTPMiddleware``): on the hot path a model call pays a few attribute reads
per layer.
"""

from __future__ import annotations

from fastapi import FastAPI

from gateway.boundary.admin_guard import AdminGuard, is_control_plane
from gateway.boundary.body_limit import BodyLimit
from gateway.boundary.host_guard import HostGuard
from gateway.boundary.retry_count import RetryCount
from gateway.boundary.server_errors import ServerErrors

__all__ = ["AdminGuard", "BodyLimit", "HostGuard", "RetryCount", "ServerErrors", "install_boundary", "is_control_plane"]


def install_boundary(app: FastAPI, max_bytes: int, admin_key: str, served_hosts: frozenset[str]) -> None:
    """The five layers, in order (Starlette wraps the middleware added last outermost)."""
    app.add_middleware(RetryCount)
    app.add_middleware(BodyLimit, max_bytes=max_bytes)
    app.add_middleware(AdminGuard, admin_key=admin_key)
    app.add_middleware(HostGuard, served_hosts=served_hosts)
    app.add_middleware(ServerErrors)
