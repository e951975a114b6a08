"""A live key's call: which session (rollout) it belongs to, opened by the call itself.

An agent configured with a live key (``harnessrl keys create``) creates no rollout: its calls open
one. A call continues the key's open session unless the session has been silent for the key's idle time,
the agent names another session (header ``x-harnessrl-session``), or the session's rollout was ended
(an admin ended it); then it opens a new one and the old one ends ``finished``, without a reward, which
feedback may bring later (``POST /api/feedback``). The key is checked on every call, so a revoked key
is refused from its next call on. A session is pinned to the version its run serves live sessions
(``store.live_keys.LiveServing``): the promoted one, or a canary candidate for a fraction of them.
"""

from __future__ import annotations

import contextlib
import random
import re
import secrets
import time

from fastapi import Request

from gateway.errors import InvalidRequest, TooManyRequests, Unauthorized
from gateway.request.session_rate import retry_after_s
from store.live_keys import KeySession, live_task
from store.records import RolloutIdentity, RolloutStatus
from store.rewards import RolloutEnded
from store.rollout_asks import PolicyPin
from store.store import Store

SESSION_HEADER = "x-harnessrl-session"
SESSION_NAME = re.compile(r"[A-Za-z0-9._:-]{1,200}")
OPEN_TRIES = 3  # gateways racing to open a key's session: each loser takes the winner's, a few times at most


async def live_identity(request: Request, store: Store, key: str, clock=time.time) -> RolloutIdentity:
    """The rollout a live key's call belongs to: its open session, or a new one."""
    name = _session_name(request)
    found = await _valid(store, key)
    identity = await _continued(store, found, name, clock())
    if identity is not None:
        return identity
    # A new session: the key's opens take turns, and each looks again once it has the turn (a call before it
    # may have opened the very session it wants), so a token is spent only by a session that opens.
    async with request.app.state.gateway.session_rate.opening(found.key.id):
        for _ in range(OPEN_TRIES):  # another gateway may still move the session between a look and an open
            found = await _valid(store, key)
            now = clock()
            identity = await _continued(store, found, name, now) or await _open(request, store, found, name, now)
            if identity is not None:
                return identity
    raise Unauthorized(
        "this live key's session kept changing under concurrent calls; retry the call", code="session_conflict"
    )


async def _continued(store: Store, found: KeySession, name: str | None, now: float) -> RolloutIdentity | None:
    """The key's open session, when this call continues it (touched: its idle time starts again), else None."""
    if not _continues(found, name, now):
        return None
    await store.live_keys.touch(found.key.id, found.rollout_id, now)
    return await store.identity_for_token(found.token)


async def _valid(store: Store, key: str) -> KeySession:
    found = await store.live_keys.presented(key)
    if found is None:
        raise Unauthorized(
            "unknown live key: create one with `harnessrl keys create --user NAME`", code="invalid_api_key"
        )
    if found.key.revoked_at is not None:
        raise Unauthorized(
            f"this live key was revoked at {found.key.revoked_at:%Y-%m-%d %H:%M} UTC: ask for a new one "
            f"(`harnessrl keys create --user {found.key.user}`)",
            code="revoked_api_key",
        )
    return found


def _session_name(request: Request) -> str | None:
    name = request.headers.get(SESSION_HEADER)
    if name is None:
        return None
    if SESSION_NAME.fullmatch(name) is None:
        raise InvalidRequest(
            f"header {SESSION_HEADER} names a session with 1-200 letters, digits, '.', '_', ':' or '-'",
            param=SESSION_HEADER,
        )
    return name


def _continues(found: KeySession, name: str | None, now: float) -> bool:
    if found.rollout_id is None or found.token is None or not found.running or found.last_call_at is None:
        return False
    if name is not None and name != found.name:
        return False
    return now - found.last_call_at < found.key.idle_s


async def _served_version(request: Request, store: Store, run: str) -> tuple[int, str]:
    """The version a new session is pinned to: the promoted one (the base model until one passes the
    gate, ``harnessrl keys promote``), or the canary candidate for its fraction of new sessions."""
    serving = await store.live_keys.serving(run)
    version, served = serving.promoted, "promoted"
    if serving.canary is not None and random.random() < serving.canary_fraction:
        version, served = serving.canary, "canary"
    await request.app.state.gateway.ensure_version(serving.policy, version)  # loaded into the engine if it is not
    return version, served


async def _open(
    request: Request, store: Store, found: KeySession, name: str | None, now: float
) -> RolloutIdentity | None:
    """A new session for the key; None when another call moved the session first (use that one)."""
    key, rate = found.key, request.app.state.gateway.session_rate
    wait_s = rate.take(key.id)
    if wait_s is not None:
        wait = retry_after_s(wait_s)
        raise TooManyRequests(
            f"this live key opens sessions faster than the gateway allows (`harnessrl serve "
            f"--live-sessions-per-minute`); retry in {wait} s or keep using the open session",
            code="live_sessions_rate",
            retry_after_s=wait,
        )
    try:
        version, served = await _served_version(request, store, key.run)
        meta = {"live": {"user": key.user, "key": key.id, "train": key.train, "session": name, "served": served}}
        group = f"session-{secrets.token_hex(6)}"  # no size: never a GRPO group, never ready by itself
        pin = PolicyPin(version)
        identity = await store.create_rollout(key.run, live_task(key.user), group=group, meta=meta, pin=pin)
        moved = await store.live_keys.move_session(key.id, found.rollout_id, identity.rollout_id, name, now)
    except BaseException:
        rate.give_back(key.id)  # no session opened: its token is not spent
        raise
    if not moved:
        rate.give_back(key.id)
        await store.end_rollout(identity.rollout_id, RolloutStatus.CANCELLED, "another call opened the session first")
        return None
    if found.rollout_id is not None and found.running:
        with contextlib.suppress(RolloutEnded):  # ended meanwhile (an admin, another gateway)
            await store.end_rollout(found.rollout_id, RolloutStatus.FINISHED, None)
    return identity
