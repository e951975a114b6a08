"""The gateway's HTTP as its clients speak it: the one transport to its control plane (runner, learner,
CLI, tool relay) and the one client of its REST API (creating rollouts, ending them with rewards,
registering a rollout's tool server, reading listings, leasing slots).

The transport (``send``) decides which transport errors are retried, with what backoff, and the named
errors a caller sees. Retried: transport errors where the gateway may never have seen the request, or
its answer was lost (it is restarting, it closed a kept-alive connection as the request went out, a
timeout), and ``503`` (its engine or its store is briefly unavailable: a store locked by another
process, a full disk), after at least the ``Retry-After`` it names (up to the backoff's longest wait).
Every request the callers send is safe to repeat: reads, rollout creation with a request id the retry
repeats, ending a rollout with its rewards (a repeat is a 409 "already ended" the caller resolves; a 503
wrote nothing), a reward (it sets its named component, never adds to it), publishing a version (a
repeat is a 409 the learner checks). Any other answer is returned to the caller, who names the fix.

Both live here, beside the publication's wire (``contracts.publication``), so a client of the gateway
imports none of the gateway's server code.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from store.capture_modes import CaptureMode
from store.records import AGENT_LOG_CHARS
from store.round_slots import RoundSlots

RETRYABLE = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ReadTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
RETRY_STATUS = 503


class GatewayUnreachable(RuntimeError):
    """Transport errors outlasted the retries; the message says how to start or point at the gateway."""


@dataclass(frozen=True)
class Backoff:
    retries: int = 3  # attempts after the first
    first_s: float = 0.2
    factor: float = 2.0
    max_s: float = 10.0

    def delays(self) -> list[float]:
        return [min(self.first_s * self.factor**k, self.max_s) for k in range(self.retries)]


async def send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    backoff: Backoff,
    unreachable_hint: str,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    **kwargs,
) -> tuple[int, httpx.Response]:
    """(attempts, the answer): transport errors and 503s retried per ``backoff``; GatewayUnreachable
    (naming ``unreachable_hint``) when transport errors outlast them. A last 503 is returned."""
    delays = backoff.delays()
    for attempt in range(1, len(delays) + 2):
        delay = delays[attempt - 1] if attempt <= len(delays) else 0.0
        try:
            response = await client.request(method, url, **kwargs)
            if response.status_code != RETRY_STATUS or attempt > len(delays):
                return attempt, response
            delay = max(delay, retry_after_s(response, backoff.max_s))
        except RETRYABLE as exc:
            if attempt > len(delays):
                raise GatewayUnreachable(
                    f"gateway at {url} unreachable after {attempt} attempts "
                    f"({type(exc).__name__}: {exc}); {unreachable_hint}"
                ) from exc
        await sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def retry_after_s(response: httpx.Response, most_s: float) -> float:
    """The seconds a 503 asks to wait (``Retry-After``; at most ``most_s``, 0 when absent or a date)."""
    value = response.headers.get("retry-after", "")
    return min(float(value), most_s) if value.isdigit() else 0.0


BACKOFF = Backoff(retries=3, first_s=0.2, factor=4.0, max_s=3.2)  # 0.2, 0.8, 3.2 s
UNREACHABLE_HINT = "start it with `harnessrl serve` or pass --gateway URL"

__all__ = ["AlreadyEnded", "GatewayClient", "GatewayRefused", "GatewayUnreachable", "rebased"]
ROLLOUT_SUFFIX = re.compile(r"/r/[A-Za-z0-9_-]+/v1/?$")


def rebased(base_url: str, gateway: str | None) -> str:
    """A rollout's base URL (``.../r/<token>/v1``) under ``gateway``, the URL this worker reaches the
    gateway by (its sandboxes' bridges connect there), or unchanged when ``gateway`` is None. The
    gateway names itself by its ``public_url`` or the Host it was asked on, which another host may not
    reach; the worker's own route to it always works from the worker."""
    match = ROLLOUT_SUFFIX.search(urlsplit(base_url).path)
    if gateway is None or match is None:
        return base_url
    return gateway.rstrip("/") + match.group(0).rstrip("/")


class AgentEnding(Protocol):
    """What ending a rollout reports of its agent (``harnesses.harness.AgentOutcome`` is one)."""

    exit_code: int
    log: str


class AlreadyEnded(RuntimeError):
    """The rollout had already ended (409)."""


class GatewayRefused(RuntimeError):
    """The gateway answered with an error; the message has its status and text (and the fix, for a 401)."""

    def __init__(self, message: str, status_code: int):
        super().__init__(message)
        self.status_code = status_code


class GatewayClient:
    def __init__(self, url: str, admin_key: str | None = None, transport: httpx.AsyncBaseTransport | None = None):
        """``transport``: httpx's own (None), or a test's."""
        headers = {"x-admin-key": admin_key} if admin_key else {}
        self.url = url.rstrip("/")
        # Idle connections expire before the server's keep-alive (uvicorn: 5 s) closes them.
        limits = httpx.Limits(max_connections=256, keepalive_expiry=2.0)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=60.0, limits=limits, transport=transport
        )

    async def create_rollout(
        self,
        run: str,
        task: str,
        group: str,
        group_size: int,
        meta: dict,
        capture: CaptureMode | None = None,
        sampling: dict | None = None,
        policy: str | None = None,
    ) -> dict:
        """Create one rollout. Each call is one attempt with its own request id, which every retry of
        it repeats: a retry whose first try did land gets that rollout back, never a second one."""
        body = {
            "run": run,
            "task": task,
            "group": group,
            "group_size": group_size,
            "meta": meta,
            "request_id": uuid.uuid4().hex,
        }
        if capture:
            body["capture"] = capture
        if sampling:
            body["sampling"] = sampling
        if policy:  # the policy a new run trains and is served (store.policies)
            body["run_policy"] = policy
        return await self._json("POST", "/api/rollouts", json=body)

    async def end_rollout(
        self,
        rollout_id: int,
        status: str,
        error: str | None,
        rewards: dict,
        reward_details: dict | None = None,
        agent: AgentEnding | None = None,
    ) -> dict:
        body = {"status": status, "error": error, "rewards": rewards}
        if reward_details:  # e.g. the judge's tokens, cost and reasons, kept with its component
            body["reward_details"] = reward_details
        if agent is not None:  # what the agent came to, for a failure to explain itself
            body["agent_exit_code"] = agent.exit_code
            body["agent_log"] = agent.log[-AGENT_LOG_CHARS:]
        try:
            return await self._json("POST", f"/api/rollouts/{rollout_id}/end", json=body)
        except AlreadyEnded:  # a retried request whose first attempt did land
            return await self.rollout(rollout_id)

    async def rollout(self, rollout_id: int) -> dict:
        return await self._json("GET", f"/api/rollouts/{rollout_id}")

    async def conversation(self, rollout_id: int) -> list[dict]:
        """The rollout's conversation as the agent saw it (normalized chat messages)."""
        return (await self._json("GET", f"/api/rollouts/{rollout_id}/conversation"))["messages"]

    async def rollouts(self, run: str) -> list[dict]:
        found, after = [], 0
        while True:
            page = await self._json("GET", "/api/rollouts", params={"run": run, "after": after, "limit": 1000})
            found += page["data"]
            if page["next_cursor"] is None:
                return found
            after = page["next_cursor"]

    async def groups(self, run: str, status: str | None = None, limit: int = 100) -> list[dict]:
        params = {"run": run, "limit": limit, **({"status": status} if status else {})}
        return (await self._json("GET", "/api/groups", params=params))["data"]

    async def listing(self, path: str, params: dict) -> list[dict]:
        """The first page of a REST listing (``/api/runs``, ``/api/groups``, ``/api/rollouts``), filtered
        by ``params`` (None values left out)."""
        query = {k: v for k, v in params.items() if v is not None}
        return (await self._json("GET", path, params=query))["data"]

    async def calls(self, rollout_id: int) -> list[dict]:
        return (await self._json("GET", f"/api/rollouts/{rollout_id}/calls"))["data"]

    async def register_tools(self, token: str, url: str) -> dict:
        """Route the rollout's ``tools/mcp`` (its token) to the tool server at ``url``; {"rollout_id", ...}."""
        return await self._json("PUT", "/api/rollout-tools", json={"token": token, "url": url})

    async def unregister_tools(self, rollout_id: int) -> None:
        await self._json("DELETE", f"/api/rollout-tools/{rollout_id}")

    async def claim_slots(
        self, slots: RoundSlots, worker: str, limit: int, lease_s: float, holding: list[int] | None = None
    ) -> dict:
        """Lease up to ``limit`` open or expired ``slots`` of a run's round for ``worker``.
        A retry whose first try did land leaves those leases unused: they expire and are claimed again
        (a delay of ``lease_s``, never a slot lost or run twice)."""
        body = {
            "run": slots.run,
            "round": slots.round,
            "group": slots.group,
            "tasks": list(slots.tasks),
            "group_size": slots.group_size,
            "worker": worker,
            "limit": limit,
            "lease_s": lease_s,
            "holding": holding or [],
        }
        return await self._json("POST", "/admin/leases/claim", json=body)

    async def renew_leases(self, worker: str, leases: list[int], lease_s: float) -> dict:
        """{"renewed": [...], "lost": [...]}: lost leases were taken over by another worker."""
        return await self._json(
            "POST", "/admin/leases/renew", json={"worker": worker, "leases": leases, "lease_s": lease_s}
        )

    async def release_leases(self, worker: str, ends: list[dict]) -> dict:
        """``ends``: [{"lease", "done", "rollout_id"}]; done slots are settled, the others open again."""
        return await self._json("POST", "/admin/leases/release", json={"worker": worker, "leases": ends})

    async def feedback(self, score: float, session: dict[str, int | str], note: str | None) -> dict:
        """A late reward for a live session named by ``session`` (``rollout_id``, ``call_id`` or ``user``);
        setting it twice leaves the same: safe to repeat."""
        body = {**session, "score": score, "note": note}
        return await self._json("POST", "/api/feedback", json={k: v for k, v in body.items() if v is not None})

    async def policy(self, name: str | None = None) -> dict:
        """What the gateway serves of a policy (None: the server's default); a 404 names the known ones."""
        return await self._json("GET", "/admin/policy", params={"policy": name} if name else None)

    async def policies(self) -> list[dict]:
        """Every policy the server knows (``GET /admin/policies``)."""
        return await self._json("GET", "/admin/policies")

    async def close(self) -> None:
        await self._http.aclose()

    async def _json(self, method: str, path: str, **kwargs) -> dict:
        _, response = await send(self._http, method, self.url + path, BACKOFF, UNREACHABLE_HINT, **kwargs)
        if response.status_code == 409 and "already ended" in response.text:
            raise AlreadyEnded(response.text)
        if response.status_code >= 400:
            raise GatewayRefused(
                f"gateway {method} {path}: {response.status_code} {response.text[:500]}"
                + (" (pass --admin-key)" if response.status_code == 401 else ""),
                response.status_code,
            )
        return response.json() if response.content else {}
