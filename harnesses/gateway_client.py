"""The one client of the gateway's REST API for the runner, the CLI and the tool relay (creating rollouts,
ending them with rewards, registering a rollout's tool server, reading listings).

Requests go through ``gateway.control_client`` (the one list of retried transport errors and its
backoff); every request here is safe to repeat (see there).
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx

from gateway.control_client import Backoff, GatewayUnreachable, send
from store.records import AGENT_LOG_CHARS

if TYPE_CHECKING:
    from harnesses.harness import AgentOutcome

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
        capture: str | None = None,
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
        agent: AgentOutcome | None = None,
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
        self,
        run: str,
        round_: int,
        group: str,
        tasks: list[str],
        group_size: int,
        worker: str,
        limit: int,
        lease_s: float,
        holding: list[int] | None = None,
    ) -> dict:
        """Lease up to ``limit`` open or expired (task, index) slots of the run's round for ``worker``.
        A retry whose first try did land leaves those leases unused: they expire and are claimed again
        (a delay of ``lease_s``, never a slot lost or run twice)."""
        body = {
            "run": run,
            "round": round_,
            "group": group,
            "tasks": tasks,
            "group_size": group_size,
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
