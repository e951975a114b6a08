"""Per rollout token, the caps a sandbox's bridge holds its agent to, for calls that reach the gateway
without one (a sandbox on another machine given ``serve --public-url``, whose one credential is its token).

- In flight: at most ``max_in_flight`` requests of one token not yet answered in full (a stream counts
  until its last byte); one more is a 429 with Retry-After in its endpoint's dialect, and its connection
  closes. The token is the one the routes read (``gateway.request.identity.presented_token``): the path's
  ``/r/<token>/`` segment, else on ``/v1/`` the API key (Authorization: Bearer, else x-api-key) when it
  carries the rollout prefix; live keys (people's, not sandboxes') and calls without a token are not
  counted. A token's entry goes when its count returns to 0: random tokens cannot grow the table beyond
  the requests in flight.
- The request body of a model route (``/v1/...``, ``/r/...``), token or not: 408 in its dialect when it
  goes ``body_read_timeout_s`` without a byte or takes more than ``body_timeout_s`` in all
  (``gateway.boundary.body_timeouts``). The response side is never timed out (long generations are normal).

Calls through a bridge pass here too, after the bridge's own checks (``sandboxes/route.py``): the same
caps. What ASGI cannot see is held below it, on each connection (``gateway.boundary.connection_guard``:
heads in time and size, connections per token; uvicorn's keep-alive timeout), the rest by a front proxy
(docs/security.md).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.boundary.body_timeouts import BodyWatch, TimedBody
from gateway.boundary.refusal import refuse
from gateway.dialects import ROLLOUT_PREFIX, rollout_path
from gateway.errors import GatewayError, TooManyRequests
from store.live_keys import LIVE_PREFIX
from store.store import TOKEN_PREFIX

RETRY_AFTER_S = 1  # as a bridge's 429
MODEL_ROUTES = (ROLLOUT_PREFIX, "/v1/")  # the paths whose requests may name a rollout token


class RequestTimeout(GatewayError):
    status_code = 408
    type = "invalid_request_error"


def too_many(cap: int) -> TooManyRequests:
    return TooManyRequests(
        f"this rollout token has {cap} requests in flight, the most one rollout may have at once (the "
        f"gateway's token_max_in_flight); retry once earlier ones are answered",
        code="too_many_in_flight",
        retry_after_s=RETRY_AFTER_S,
    )


class TokenCaps:
    def __init__(
        self,
        app: ASGIApp,
        max_in_flight: int,
        body_read_timeout_s: float,
        body_timeout_s: float,
        in_flight: dict[str, int] | None = None,
    ):
        self.app, self.max_in_flight = app, max_in_flight
        self.watch = BodyWatch(body_read_timeout_s, body_timeout_s)
        self.in_flight: dict[str, int] = {} if in_flight is None else in_flight  # token -> requests, none at 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path: str = scope["path"]
        if not path.startswith(MODEL_ROUTES):
            return await self.app(scope, receive, send)  # the control plane, /health, the viewer
        token = request_token(path, scope["headers"])
        if token is None:
            return await self._timed(scope, receive, send)
        counts = self.in_flight
        held = counts.get(token, 0)
        if held >= self.max_in_flight:
            return await refuse(scope, receive, send, too_many(self.max_in_flight), close=True)
        counts[token] = held + 1
        try:
            await self._timed(scope, receive, send)
        finally:
            left = counts[token] - 1
            if left:
                counts[token] = left
            else:
                del counts[token]

    async def _timed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, with the request body read under the timeouts; a 408 when the body was too slow."""
        body = TimedBody(receive, send, self.watch)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if body.late is None or body.started:
                raise  # not the cut body's doing: ServerErrors answers it
        if body.late is not None and not body.started:
            await refuse(scope, receive, send, self.too_slow(body.late), close=True)

    def too_slow(self, setting: str) -> RequestTimeout:
        if setting == "body_read_timeout_s":
            said = f"sent no byte for {self.watch.read_s:g} s"
        else:
            said = f"took more than {self.watch.total_s:g} s in all"
        return RequestTimeout(
            f"the request body {said} (the gateway's {setting}); send the body at once", code="request_timeout"
        )


def request_token(path: str, headers: list[tuple[bytes, bytes]]) -> str | None:
    """The rollout token a model route's request names (the ``/r/<token>/`` segment, else on ``/v1/`` the
    API key), read as the routes read it; None for one naming none."""
    if path.startswith(ROLLOUT_PREFIX):
        named = rollout_path(path)
        return None if named is None else named[0]
    return header_token(headers) if path.startswith("/v1/") else None


def header_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The rollout token among a request's API keys, read as ``gateway.request.identity`` reads it (the
    first Authorization: Bearer, else the first x-api-key; latin-1, stripped as text), or None."""
    authorization = api_key = None
    for name, value in headers:
        if name == b"authorization":
            authorization = value if authorization is None else authorization
        elif name == b"x-api-key":
            api_key = value if api_key is None else api_key
    if authorization is not None and authorization[:7].lower() == b"bearer ":
        key = authorization[7:].decode("latin-1").strip()
    else:
        key = (api_key or b"").decode("latin-1").strip()
    if key.startswith(TOKEN_PREFIX) and not key.startswith(LIVE_PREFIX):
        return key
    return None
