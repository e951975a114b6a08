"""`harnessrl ls --gateway URL`: the same tables as `ls` on a store, read over a gateway's REST API.

For a store the CLI cannot open itself (a PostgreSQL behind the gateway, another machine): the
listings are GET /api/runs, /api/groups and /api/rollouts, with the admin key.
"""

from __future__ import annotations

import asyncio

from rich.table import Table

from contracts.gateway_client import GatewayClient, GatewayRefused, GatewayUnreachable
from harnessrl.reports.views import LISTINGS, listing_table
from store.listings import RolloutFilter


class GatewayReadError(RuntimeError):
    """The gateway refused or could not answer; the message names the fix."""


POLICIES_PATH = "/admin/policies"


def gateway_list_view(url: str, admin_key: str, what: str, where: RolloutFilter, limit: int) -> Table:
    """``harnessrl ls``'s table (``harnessrl.reports.views.listing_table``) of a gateway's listing."""
    if what == "policies":
        return listing_table(what, _get(url, admin_key, POLICIES_PATH, {}))
    if what == "runs":
        path, params = "/api/runs", {"name": where.run, "order": "desc"}
    elif what == "groups":
        path, params = "/api/groups", {"run": where.run, "task": where.task, "status": where.status}
    elif what == "rollouts":
        path = "/api/rollouts"
        params = {
            "run": where.run, "task": where.task, "status": where.status, "harness": where.harness,
            "policy_version": where.policy_version, "reward_min": where.reward_min, "reward_max": where.reward_max,
        }  # fmt: skip
    else:
        raise ValueError(f"ls shows {LISTINGS}, not {what!r}")
    return listing_table(what, _get(url, admin_key, path, {**params, "limit": limit}))


def _get(url: str, admin_key: str, path: str, params: dict) -> list[dict]:
    try:
        return asyncio.run(_listing(url, admin_key, path, params))
    except GatewayUnreachable as exc:
        raise GatewayReadError(str(exc)) from None
    except GatewayRefused as exc:
        if exc.status_code == 401:
            raise GatewayReadError(
                f"the gateway at {url} refused the admin key: pass --admin-key, set "
                f"HARNESSRL_ADMIN_KEY, or use the $HARNESSRL_HOME/admin.key of its `harnessrl serve`"
            ) from None
        raise GatewayReadError(str(exc)) from None


async def _listing(url: str, admin_key: str, path: str, params: dict) -> list[dict]:
    gateway = GatewayClient(url, admin_key)
    try:
        if path == POLICIES_PATH:  # one list, not pages
            return await gateway.policies()
        return await gateway.listing(path, params)
    finally:
        await gateway.close()
