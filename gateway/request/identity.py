"""Who may do what: the admin key opens the control plane, a rollout token its own model endpoints, a
live key the model endpoints for its user's sessions (``live_sessions``).

Two planes. The data plane (the model endpoints of the three dialects, count_tokens, models) is
opened by a rollout token, for that rollout only and only while it runs. The control plane (every
/api route, reads included, and /admin) needs the admin key. Every request must also name a Host
this gateway serves, so a web page of another site (DNS rebinding) cannot reach it from a browser.
"""

from __future__ import annotations

import re
import secrets

from fastapi import Request

from gateway.errors import GatewayError, Unauthorized
from gateway.request.live_sessions import live_identity
from store.live_keys import LIVE_PREFIX
from store.records import RolloutIdentity
from store.store import TOKEN_PREFIX, Store


class MisdirectedRequest(GatewayError):
    status_code = 421
    type = "invalid_request_error"


# What a rollout token can be (store.store makes TOKEN_PREFIX + token_urlsafe; the prefix holds no pattern
# characters): a path segment that is not one is refused before the store is asked, whatever it holds
# (non-ASCII, spaces, another prefix). The OpenAPI document gives the pattern too (gateway.docs).
TOKEN_PATTERN = TOKEN_PREFIX + "[A-Za-z0-9_-]{1,256}"
TOKEN_SHAPE = re.compile(TOKEN_PATTERN)


def presented_token(request: Request) -> tuple[str | None, bool]:
    """The token the client presented and whether it is explicitly ours (path or our prefix).

    Clients always send some API key ("EMPTY", "sk-..."), so a header value only counts as a
    rollout token when it carries our prefix; a token in the /r/<token>/ path always counts.
    """
    path_token = request.path_params.get("token")
    header = _header_key(request)
    if path_token:
        if TOKEN_SHAPE.fullmatch(path_token) is None or path_token.startswith(LIVE_PREFIX):
            raise Unauthorized(
                "the URL path's /r/<token>/ segment is not a rollout token; use the base_url that "
                "POST /api/rollouts returned (a live key goes in the API key header, on /v1)",
                code="invalid_api_key",
            )
        # as bytes: a header's text is latin-1 and may hold what compare_digest refuses as str
        if (
            header
            and header.startswith(TOKEN_PREFIX)
            and not secrets.compare_digest(header.encode(), path_token.encode())
        ):
            raise Unauthorized(
                "the API key is another rollout's token than the one in the URL path; "
                "a rollout token opens only its own /r/<token>/v1 endpoints",
                code="invalid_api_key",
            )
        return path_token, True
    if not header:
        return None, False
    return header, header.startswith(TOKEN_PREFIX)


def _header_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("x-api-key", "").strip()


async def resolve_identity(request: Request, store: Store, require_token: bool) -> RolloutIdentity:
    """The rollout a model call belongs to; an unknown token, or one of an ended rollout, is a 401."""
    token, explicit = presented_token(request)
    if token is not None and token.startswith(LIVE_PREFIX) and not request.path_params.get("token"):
        return await live_identity(request, store, token)  # a live key: its session, opened by the call
    if token is not None and (explicit or require_token):
        identity = await store.identity_for_token(token)
        if identity is None:
            raise Unauthorized(
                "unknown rollout token; create one with POST /api/rollouts and use its base_url",
                code="invalid_api_key",
            )
        ended = await store.rollout_ended(identity.rollout_id)
        if ended is not None:
            raise Unauthorized(
                f"rollout {identity.rollout_id} has ended ({ended}); its token no longer opens the "
                f"model endpoints: start a new rollout with POST /api/rollouts",
                code="rollout_ended",
            )
        return identity
    if require_token:
        raise Unauthorized(
            "this gateway requires a rollout token (it runs with --require-token); create one "
            "with POST /api/rollouts and use its base_url",
            code="missing_api_key",
        )
    return await store.adhoc_identity()


def presented_admin_key(request: Request) -> str:
    presented = request.headers.get("x-admin-key") or ""
    header = request.headers.get("authorization", "")
    if not presented and header.lower().startswith("bearer "):
        presented = header[7:].strip()
    return presented


def require_admin(request: Request, admin_key: str) -> None:
    """The control plane (/api reads and writes, /admin) needs the admin key; nothing else opens it."""
    if not admin_key:  # GatewaySettings refuses an empty key; this guards any other caller
        raise Unauthorized("this gateway has no admin key, so its control plane is closed", code="invalid_admin_key")
    presented = presented_admin_key(request)
    if secrets.compare_digest(presented.encode(), admin_key.encode()):
        return
    if presented.startswith(LIVE_PREFIX):
        raise Unauthorized(
            "a live key opens only the model endpoints (/v1/...) for its user's sessions; "
            "/api and /admin need the gateway's admin key",
            code="invalid_admin_key",
        )
    if presented.startswith(TOKEN_PREFIX):
        raise Unauthorized(
            "a rollout token opens only its rollout's model endpoints (/r/<token>/v1/...); "
            "/api and /admin need the gateway's admin key",
            code="invalid_admin_key",
        )
    what = "a wrong admin key" if presented else "no admin key"
    raise Unauthorized(
        f"this endpoint needs the gateway's admin key and got {what}: send it as header "
        f"x-admin-key or Authorization: Bearer; `harnessrl serve` keeps it in "
        f"$HARNESSRL_HOME/admin.key (or was given --admin-key / HARNESSRL_ADMIN_KEY)",
        code="invalid_admin_key",
    )


def require_served_host(request: Request, served: frozenset[str]) -> None:
    """Refuse a Host header this gateway was not configured for (421, in the endpoint's dialect)."""
    if "*" in served:
        return
    host = request.headers.get("host")
    if host is None:  # HTTP/1.0 without Host: no browser sends that, so no rebinding either
        return
    name = host_name(host)
    if name is None or name not in served:
        raise MisdirectedRequest(
            f"this gateway does not serve Host {host!r}; reach it by a configured name "
            f"(loopback, its public URL) or add the name with `harnessrl serve --allowed-host NAME`",
            code="host_not_allowed",
        )


# A Host header's authority: "[IPv6]" or a name (no ":", "[" or "]"), then an optional ":port".
HOST_AUTHORITY = re.compile(r"(?:\[(?P<ip6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]]+))(?::[0-9]*)?")


def host_name(host: str) -> str | None:
    """A Host header's name: lower case, without port, brackets or a trailing dot; None when the
    header is no authority (``[::1]evil.example``, a bare IPv6 address, a port that is not a number)."""
    match = HOST_AUTHORITY.fullmatch(host.strip().lower())
    if match is None:
        return None
    return match["ip6"] or match["name"].rstrip(".")
