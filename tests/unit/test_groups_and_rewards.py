"""Rewards add up per rollout; a group is ready once all of its rollouts ended; writes need the admin key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway

ADMIN = {"x-admin-key": "s3cret"}


async def test_reward_components_add_up_and_none_is_left_out(gateway):
    rollout = await gateway.new_rollout()
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/reward", json={"name": "judge", "value": None})
    assert (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()["reward"] is None
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/reward", json={"name": "style", "value": 0.25})
    done = await gateway.http.post(
        f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"verifier": 1.0}}
    )
    view = done.json()
    assert view["reward"] == 1.25 and view["rewards"] == {"judge": None, "style": 0.25, "verifier": 1.0}
    assert view["status"] == "finished" and view["finished_at"] is not None


async def test_group_becomes_ready_when_all_its_rollouts_ended(gateway):
    rollouts = [await gateway.new_rollout(run="grpo", task="t1", group="g", group_size=3) for _ in range(3)]
    ended = [("finished", None), ("failed", "timeout after 600 s"), ("finished", None)]
    for n, (rollout, (status, error)) in enumerate(zip(rollouts, ended)):
        groups = (await gateway.http.get("/api/groups", params={"run": "grpo"})).json()["data"]
        assert groups[0]["status"] == "open" and groups[0]["size"] == 3
        await gateway.http.post(
            f"/api/rollouts/{rollout['id']}/end",
            json={"status": status, "error": error, "rewards": {"verifier": float(n)}},
        )
    [group] = (await gateway.http.get("/api/groups", params={"run": "grpo", "status": "ready"})).json()["data"]
    assert group["ready_at"] is not None and group["task"] == "t1"


async def test_a_rollout_ends_only_once(gateway):
    rollout = await gateway.new_rollout()
    first = await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished"})
    again = await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "failed"})
    assert first.status_code == 200 and again.status_code == 409
    bad = await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "exploded"})
    assert bad.status_code == 400


@pytest.fixture
async def guarded_gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key="s3cret")
    async for harness in start_gateway(settings, fake_engine):
        yield harness


async def test_store_writes_need_the_admin_key_when_one_is_set(guarded_gateway):
    http = guarded_gateway.http
    refused = await guarded_gateway.agent.post("/api/rollouts", json={"run": "r", "task": "t"})
    assert refused.status_code == 401 and "admin key" in refused.json()["error"]["message"]
    rollout = (await http.post("/api/rollouts", json={"run": "r", "task": "t"}, headers=ADMIN)).json()
    # An agent holding only its rollout token cannot score itself.
    forged = await guarded_gateway.agent.post(
        f"/api/rollouts/{rollout['id']}/reward",
        json={"value": 100.0},
        headers={"authorization": f"Bearer {rollout['token']}"},
    )
    assert forged.status_code == 401
    assert (await http.get(f"/api/rollouts/{rollout['id']}")).json()["reward"] is None


async def test_the_finish_route_is_the_end_routes_old_name(gateway):
    rollout = await gateway.new_rollout()
    ended = await gateway.http.post(f"/api/rollouts/{rollout['id']}/finish", json={"status": "failed", "error": "x"})
    again = await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished"})
    assert ended.status_code == 200 and ended.json()["status"] == "failed" and again.status_code == 409
