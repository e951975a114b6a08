"""Every moment the REST API and the export write carries its UTC offset, on SQLite too (which keeps no zone:
``store.tables.UTCDateTime`` reads every moment back in UTC)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from harnessrl.reports.export import run_records
from tests.builders import chat_body

MOMENT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def moments(value) -> list[str]:
    """Every string in a JSON value that reads as a date and a time."""
    if isinstance(value, dict):
        return [m for item in value.values() for m in moments(item)]
    if isinstance(value, list):
        return [m for item in value for m in moments(item)]
    return [value] if isinstance(value, str) and MOMENT.match(value) else []


def has_utc_offset(moment: str) -> bool:
    return datetime.fromisoformat(moment).utcoffset() == timedelta(0)


async def seeded_gateway(gateway) -> dict[str, str]:
    """A run with a called, rewarded and ended rollout, a published version and a learner step; the path
    parameters that name them."""
    rollout = await gateway.new_rollout(run="offsets", group_size=1)
    call = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=chat_body())
    ended = await gateway.http.post(
        f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"ok": 1.0}}
    )
    assert call.status_code == 200 and ended.status_code == 200, (call.text, ended.text)
    store = gateway.state.store
    await store.adapters.save("policy", 1, "policy-v1", "/adapters/v1", loaded=False, digest="a" * 64)
    stored, *_ = await store.get_rollout(rollout["id"])
    await store.training.record_step(stored.run_id, 1, {"loss": 0.5})
    return {
        "rollout_id": str(rollout["id"]),
        "call_id": call.headers["x-harnessrl-call-id"],
        "group_id": str(stored.group_id),
        "name": "offsets",
        "policy": "policy",
    }


async def test_every_moment_the_rest_api_writes_carries_its_utc_offset(gateway):
    names = await seeded_gateway(gateway)
    routes = [
        route.path
        for route in gateway.app.routes
        if "GET" in (getattr(route, "methods", None) or ()) and route.path.startswith(("/api/", "/admin/"))
    ]
    written: dict[str, list[str]] = {}
    for route in routes:
        path = re.sub(r"\{(\w+)\}", lambda m: names[m.group(1)], route)
        response = await gateway.http.get(path)
        assert response.status_code == 200, (path, response.text)
        written[route] = moments(response.json())
    assert written["/api/policies/{policy}"] and written["/api/runs/{name}/steps"] and written["/api/groups"]
    assert {route: [m for m in found if not has_utc_offset(m)] for route, found in written.items()} == {
        route: [] for route in written
    }


async def test_the_exports_timestamps_carry_their_utc_offset(gateway):
    await seeded_gateway(gateway)
    records = [record async for page in run_records(gateway.state.store, "offsets", False, None) for record in page]
    assert records and all(has_utc_offset(record["metadata"]["timestamp"]) for record in records)
