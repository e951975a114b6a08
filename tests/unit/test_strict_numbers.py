"""Every number a REST or admin request body carries is a JSON number: a string ("1") or a boolean (true)
is a 400 naming the field, not a number coerced from it; an integer is still a float (JSON has one number)."""

from __future__ import annotations

import pytest

from tests.unit.test_errors import assert_openai_error

ROLLOUT = {"run": "strict", "task": "t"}
CLAIM = {"run": "strict", "group": "r0", "tasks": ["a"], "group_size": 2, "worker": "w1", "limit": 2, "lease_s": 30}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/api/feedback", {"rollout_id": 1, "score": "1"}, "score"),
        ("/api/feedback", {"rollout_id": 1, "score": True}, "score"),
        ("/api/feedback", {"rollout_id": "1", "score": 1}, "rollout_id"),
        ("/api/rollouts", {**ROLLOUT, "group_size": "2"}, "group_size"),
        ("/api/rollouts", {**ROLLOUT, "group_size": True}, "group_size"),
        ("/api/rollouts", {**ROLLOUT, "sampling": {"temperature": "1"}}, "sampling.temperature"),
        ("/api/rollouts", {**ROLLOUT, "sampling": {"top_p": True}}, "sampling.top_p"),
        ("/api/rollouts/{id}/end", {"status": "failed", "agent_exit_code": "1"}, "agent_exit_code"),
        ("/admin/leases/claim", {**CLAIM, "group_size": "2"}, "group_size"),
        ("/admin/leases/claim", {**CLAIM, "lease_s": True}, "lease_s"),
        ("/admin/adapters", {"version": "1", "path": "/nope"}, "version"),
    ],
)
async def test_a_string_or_a_boolean_for_a_number_is_a_400_naming_the_field(gateway, path, body, param):
    rollout = await gateway.new_rollout()
    response = await gateway.http.post(path.format(id=rollout["id"]), json=body)
    error = assert_openai_error(response, 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert (await gateway.http.get("/api/rollouts", params={"run": "strict"})).json()["data"] == []


async def test_an_integer_is_taken_where_a_float_is_asked(gateway):
    sampled = await gateway.new_rollout(run="ints", group_size=2, sampling={"temperature": 1, "top_p": 1})
    rewarded = await gateway.http.post(f"/api/rollouts/{sampled['id']}/reward", json={"name": "judge", "value": 1})
    assert rewarded.status_code == 200 and rewarded.json()["rewards"] == {"judge": 1.0}
    claimed = await gateway.http.post("/admin/leases/claim", json={**CLAIM, "run": "ints", "lease_s": 30})
    assert claimed.status_code == 200, claimed.text
