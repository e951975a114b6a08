"""The gateway's ASGI boundary: what every request passes before a route sees it, one middleware per job.

Outermost first (``install_boundary``):

1. ``ServerErrors``: an exception no handler mapped becomes a 500 naming an error id (a store failing
   for a while, a 503 with Retry-After); no exception text ever leaves.
2. ``HostGuard``: the Host header must name this gateway (DNS rebinding).
3. ``AdminGuard``: a path under ``/api`` or ``/admin`` (the control plane) needs the admin key.
4. ``TokenCaps``: per rollout token, at most so many requests in flight (429), and a model route's body
   read under a bridge's timeouts (408): a sandbox that reaches the gateway without a bridge
   (``serve --public-url``) is held to its caps here.
5. ``BodyLimit``: a body over the limit is refused while it streams in (413 in the dialect's shape).
6. ``RetryCount``: the SDKs' retry count header, noted for the pipeline (``gateway.request.retries``).
7. ``ModelLane``: a model route's request goes straight to its endpoint (not through FastAPI's router
   and request handler); every other request goes on to the app.

Below them, on each connection, ``connection_guard`` (uvicorn's HTTP protocol, installed by
``harnessrl.server``): each request's head in time and in size, a body answered early never read on,
each rollout token's connections counted.

Each is plain ASGI (no ``BaseHTTPMiddleware``): on the hot path a model call pays a few attribute reads
per layer.
"""

from __future__ import annotations

from fastapi import FastAPI

from gateway.boundary.admin_guard import AdminGuard, is_control_plane
from gateway.boundary.body_limit import BodyLimit
from gateway.boundary.host_guard import HostGuard
from gateway.boundary.model_lane import ModelLane
from gateway.boundary.retry_count import RetryCount
from gateway.boundary.server_errors import ServerErrors
from gateway.boundary.token_caps import TokenCaps
from gateway.settings import GatewaySettings

__all__ = [
    "AdminGuard",
    "BodyLimit",
    "HostGuard",
    "ModelLane",
    "RetryCount",
    "ServerErrors",
    "TokenCaps",
    "install_boundary",
    "is_control_plane",
]


def install_boundary(app: FastAPI, settings: GatewaySettings) -> None:
    """The seven layers, in order (Starlette wraps the middleware added last outermost). The requests in flight
    per rollout token are ``app.state.tokens_in_flight`` (token -> count; a token at 0 has no entry)."""
    app.state.tokens_in_flight = in_flight = {}
    app.add_middleware(ModelLane)
    app.add_middleware(RetryCount)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        TokenCaps,
        max_in_flight=settings.token_max_in_flight,
        body_read_timeout_s=settings.body_read_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        in_flight=in_flight,
    )
    app.add_middleware(AdminGuard, admin_key=settings.admin_key)
    app.add_middleware(HostGuard, served_hosts=settings.served_hosts())
    app.add_middleware(ServerErrors)
