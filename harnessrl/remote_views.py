"""`harnessrl ls --gateway URL`: the same tables as `ls` on a store, read over a gateway's REST API.

For a store the CLI cannot open itself (a PostgreSQL behind the gateway, another machine): the
listings are GET /api/runs, /api/groups and /api/rollouts, with the admin key.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from rich.table import Table

from gateway.store.listings import RolloutFilter
from harnesses.gateway_client import GatewayClient, GatewayRefused, GatewayUnreachable


class GatewayReadError(RuntimeError):
    """The gateway refused or could not answer; the message names the fix."""


def gateway_list_view(url: str, admin_key: str, what: str, where: RolloutFilter, limit: int) -> Table:
    if what == "runs":
        rows = _get(url, admin_key, "/api/runs", {"name": where.run, "order": "desc", "limit": limit})
        table = _table("id", "name", "capture", "created", "rollouts", "finished", "reward", "last activity")
        table.columns[1].no_wrap = True  # a name is what one copies into --run
        for r in rows:
            table.add_row(
                str(r["id"]),
                r["name"],
                (r["config"] or {}).get("capture", "engine"),
                _when(r["created_at"], "%Y-%m-%d %H:%M"),
                str(r["rollouts"]),
                str(r["rollouts_finished"]),
                "" if r["reward_mean"] is None else f"{r['reward_mean']:.3f}",
                _when(r["last_activity"], "%Y-%m-%d %H:%M:%S"),
            )
        return table
    if what == "groups":
        params = {"run": where.run, "task": where.task, "status": where.status, "limit": limit}
        table = _table("id", "run", "task", "group", "status", "size", "ready")
        for g in _get(url, admin_key, "/api/groups", params):
            table.add_row(
                str(g["id"]),
                g["run"],
                g["task"],
                g["name"],
                g["status"],
                str(g["size"] or ""),
                _when(g["ready_at"], "%H:%M:%S"),
            )
        return table
    if what == "rollouts":
        params = {
            "run": where.run,
            "task": where.task,
            "status": where.status,
            "harness": where.harness,
            "policy_version": where.policy_version,
            "reward_min": where.reward_min,
            "reward_max": where.reward_max,
            "limit": limit,
        }
        table = _table("id", "run", "task", "group", "status", "reward", "error")
        for r in _get(url, admin_key, "/api/rollouts", params):
            table.add_row(
                str(r["id"]),
                r["run"],
                r["task"],
                r["group"],
                r["status"],
                "" if r["reward"] is None else f"{r['reward']:.3f}",
                (r["error"] or "")[:60],
            )
        return table
    raise ValueError(f"ls shows runs, groups or rollouts, not {what!r}")


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
        return await gateway.listing(path, params)
    finally:
        await gateway.close()


def _when(value: str | None, layout: str) -> str:
    return "" if value is None else f"{datetime.fromisoformat(value):{layout}}"


def _table(*columns: str) -> Table:
    table = Table(show_lines=False)
    for column in columns:
        table.add_column(column)
    return table
