"""Which rollout a call belongs to: the token in the path, the Bearer header or x-api-key."""

from __future__ import annotations

import secrets

from fastapi import Request

from gateway.errors import Unauthorized
from gateway.store.records import RolloutIdentity
from gateway.store.store import TOKEN_PREFIX, Store


def presented_token(request: Request) -> tuple[str | None, bool]:
    """The token the client presented and whether it is explicitly ours (path or our prefix).

    Clients always send some API key ("EMPTY", "sk-..."), so a header value only counts as a
    rollout token when it carries our prefix; a token in the /r/<token>/ path always counts.
    """
    token = request.path_params.get("token")
    if token:
        return token, True
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        header = header[7:].strip()
    else:
        header = request.headers.get("x-api-key", "").strip()
    if not header:
        return None, False
    return header, header.startswith(TOKEN_PREFIX)


async def resolve_identity(request: Request, store: Store, require_token: bool) -> RolloutIdentity:
    token, explicit = presented_token(request)
    if token is not None and (explicit or require_token):
        identity = await store.identity_for_token(token)
        if identity is None:
            raise Unauthorized(
                "unknown rollout token; create one with POST /api/rollouts and use its base_url",
                code="invalid_api_key",
            )
        return identity
    if require_token:
        raise Unauthorized(
            "this gateway requires a rollout token (it runs with --require-token); create one "
            "with POST /api/rollouts and use its base_url",
            code="missing_api_key",
        )
    return await store.adhoc_identity()


def require_admin(request: Request, admin_key: str | None) -> None:
    """Writes to the store's REST API and adapter admin need the admin key, when one is set."""
    if admin_key is None:
        return
    presented = request.headers.get("x-admin-key") or ""
    header = request.headers.get("authorization", "")
    if not presented and header.lower().startswith("bearer "):
        presented = header[7:].strip()
    if not secrets.compare_digest(presented.encode(), admin_key.encode()):
        raise Unauthorized("this endpoint needs the gateway's admin key (header x-admin-key); "
                           "it is set with `harnessrl serve --admin-key` or HARNESSRL_ADMIN_KEY",
                           code="invalid_admin_key")
