"""Slot leases on SQLite, and their admin routes (closed to rollout tokens)."""

from __future__ import annotations

import pytest

from tests.lease_scenarios import (
    check_claim_renew_expire_take_over,
    check_claims_follow_the_round_order,
    check_concurrent_claims_are_disjoint,
    check_take_overs_race_finishes,
)

CLAIM = {
    "run": "leased",
    "round": 0,
    "group": "r0",
    "tasks": ["a"],
    "group_size": 2,
    "worker": "w1",
    "limit": 2,
    "lease_s": 30.0,
}


async def test_slots_are_claimed_renewed_expired_and_taken_over_on_sqlite(sqlite_db):
    await check_claim_renew_expire_take_over(sqlite_db)


async def test_claims_follow_the_order_of_the_rounds_tasks_on_sqlite(sqlite_db):
    await check_claims_follow_the_round_order(sqlite_db)


async def test_concurrent_claims_get_disjoint_slots_on_sqlite(sqlite_db):
    await check_concurrent_claims_are_disjoint(sqlite_db)


async def test_take_overs_racing_finishes_do_not_replay_a_finished_slot_on_sqlite(sqlite_db):
    await check_take_overs_race_finishes(sqlite_db)


async def test_the_admin_routes_claim_renew_and_release_slots(gateway):
    claimed = (await gateway.http.post("/admin/leases/claim", json=CLAIM)).json()
    assert [(x["task"], x["index"], x["attempts"]) for x in claimed["leases"]] == [("a", 0, 1), ("a", 1, 1)]
    ids = [x["id"] for x in claimed["leases"]]
    renewed = (
        await gateway.http.post("/admin/leases/renew", json={"worker": "w2", "leases": ids, "lease_s": 30.0})
    ).json()
    assert renewed == {"renewed": [], "lost": ids}  # not w2's
    renewed = (
        await gateway.http.post("/admin/leases/renew", json={"worker": "w1", "leases": ids, "lease_s": 30.0})
    ).json()
    assert renewed == {"renewed": ids, "lost": []}
    released = await gateway.http.post(
        "/admin/leases/release", json={"worker": "w1", "leases": [{"lease": ids[0], "done": False}]}
    )
    assert released.json() == {"lost": []}
    again = (await gateway.http.post("/admin/leases/claim", json={**CLAIM, "worker": "w2"})).json()
    assert [x["id"] for x in again["leases"]] == [ids[0]] and again["remaining"] == 2


@pytest.mark.parametrize(
    "path, body",
    [
        ("/admin/leases/claim", CLAIM),
        ("/admin/leases/renew", {"worker": "w1", "leases": [1], "lease_s": 3600}),
        ("/admin/leases/release", {"worker": "w1", "leases": [{"lease": 1, "done": True, "rollout_id": 1}]}),
    ],
)
async def test_an_agent_with_its_rollout_token_cannot_claim_renew_or_release_slots(gateway, path, body):
    """An agent that wants its slot played again (or another's stopped) holds only its rollout token."""
    await gateway.http.post("/admin/leases/claim", json=CLAIM)  # w1 holds both slots
    rollout = await gateway.new_rollout(run="leased", task="a", group="r0", group_size=2, meta={"round": 0, "index": 0})
    token = rollout["token"]
    for headers in ({"authorization": f"Bearer {token}"}, {"x-api-key": token}, {"x-admin-key": token}):
        refused = await gateway.agent.post(path, json=body, headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_admin_key"
    refused = await gateway.agent.post(f"/r/{token}/admin/leases/claim", json=CLAIM)
    assert refused.status_code in (401, 404)
    leases = (
        await gateway.http.post("/admin/leases/renew", json={"worker": "w1", "leases": [1, 2], "lease_s": 30.0})
    ).json()
    assert leases == {"renewed": [1, 2], "lost": []}  # still w1's, unchanged
    view = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()
    assert view["status"] == "running"


async def test_claims_refuse_unbounded_requests(gateway):
    for bad in (
        {**CLAIM, "lease_s": 0},
        {**CLAIM, "limit": -1},
        {**CLAIM, "tasks": []},
        {**CLAIM, "worker": ""},
        {**CLAIM, "extra": 1},
    ):
        assert (await gateway.http.post("/admin/leases/claim", json=bad)).status_code == 400


@pytest.mark.parametrize("done", [0, 1, "true", "false", None])
async def test_a_release_takes_done_only_as_a_json_boolean(gateway, done):
    claimed = (await gateway.http.post("/admin/leases/claim", json=CLAIM)).json()
    lease = claimed["leases"][0]["id"]
    refused = await gateway.http.post(
        "/admin/leases/release", json={"worker": "w1", "leases": [{"lease": lease, "done": done}]}
    )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "leases.0.done", error
    renewed = await gateway.http.post("/admin/leases/renew", json={"worker": "w1", "leases": [lease], "lease_s": 30.0})
    assert renewed.json() == {"renewed": [lease], "lost": []}  # still held: nothing was released
