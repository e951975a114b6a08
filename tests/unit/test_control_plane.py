"""The control plane (/api reads and writes, /admin) opens only with the admin key.

Each route is found in the app's own route table, so a route added later is covered without
naming it here. Refused requests leave every row of the store and the engine's adapters as they were.
"""

from __future__ import annotations

import re

import pytest
from fastapi.routing import APIRoute

from tests.builders import TEST_ADMIN_KEY, chat_body
from tests.store_snapshot import store_snapshot

# Requests an attacking agent would send: forge rewards, end a sibling, crowd a group, load an adapter.
ATTACKS = {
    "/api/rollouts": {"run": "test-run", "task": "task-1", "group": "g"},
    "/api/rollouts/{rollout_id}/reward": {"name": "forged", "value": 1000.0},
    "/api/rollouts/{rollout_id}/end": {"status": "failed", "error": "killed by a sibling"},
    "/admin/adapters": {"version": 1_000_000, "path": "/tmp/evil-adapter"},
}


def control_plane_routes(app) -> list[tuple[str, str]]:
    routes = [
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute) and re.match(r"^/(api|admin)(/|$)", route.path)
        for method in sorted(route.methods)
    ]
    assert len(routes) >= 18, routes  # the route table was read, not an empty list
    return routes


async def victim(gateway) -> dict:
    """A rollout with one call, in a group of two; ids for every path parameter."""
    rollout = await gateway.new_rollout(group="g", group_size=2)
    reply = await gateway.http.post(f"/r/{rollout['token']}/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200, reply.text
    found = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()
    return {
        "rollout_id": rollout["id"],
        "group_id": found["group_id"],
        "name": "test-run",
        "policy": "policy",
        "call_id": int(reply.headers["x-harnessrl-call-id"]),
        "token": rollout["token"],
    }


def url_of(path: str, ids: dict) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: str(ids.get(m.group(1), 1)), path)


def refusals(token: str) -> dict[str, dict]:
    return {
        "no key": {},
        "wrong key": {"x-admin-key": "not-the-key"},
        "wrong bearer": {"authorization": "Bearer not-the-key"},
        "rollout token as admin key": {"x-admin-key": token},
        "rollout token as bearer": {"authorization": f"Bearer {token}"},
        "rollout token as api key": {"x-api-key": token},
        "key prefix": {"x-admin-key": TEST_ADMIN_KEY[:-1]},
    }


async def test_every_control_plane_route_refuses_requests_without_the_admin_key(gateway, sqlite_db):
    ids = await victim(gateway)
    before, adapters = store_snapshot(sqlite_db), dict(gateway.fake.adapters)
    for method, path in control_plane_routes(gateway.app):
        for what, headers in refusals(ids["token"]).items():
            response = await gateway.agent.request(
                method, url_of(path, ids), headers=headers, json=ATTACKS.get(path, {}) if method == "POST" else None
            )
            assert response.status_code == 401, (method, path, what, response.text)
            error = response.json()["error"]
            assert error["code"] == "invalid_admin_key" and "admin key" in error["message"], (method, path, what)
    assert store_snapshot(sqlite_db) == before
    assert gateway.fake.adapters == adapters


async def test_a_rollout_token_offered_as_the_admin_key_is_told_what_it_opens(gateway):
    ids = await victim(gateway)
    response = await gateway.agent.get("/api/runs", headers={"x-admin-key": ids["token"]})
    assert response.status_code == 401
    assert "rollout token opens only its rollout's model endpoints" in response.json()["error"]["message"]


async def test_every_control_plane_read_answers_with_the_key(gateway):
    ids = await victim(gateway)
    for method, path in control_plane_routes(gateway.app):
        if method == "GET":
            response = await gateway.agent.get(url_of(path, ids), headers={"authorization": f"Bearer {TEST_ADMIN_KEY}"})
            assert response.status_code == 200, (path, response.text)


async def test_the_writes_an_agent_would_forge_work_with_the_key(gateway):
    ids = await victim(gateway)
    headers = {"x-admin-key": TEST_ADMIN_KEY}
    for path, status in (
        ("/api/rollouts/{rollout_id}/reward", 200),
        ("/api/rollouts/{rollout_id}/end", 200),
        ("/api/rollouts", 201),
        ("/admin/adapters", 200),
    ):
        response = await gateway.agent.post(url_of(path, ids), json=ATTACKS[path], headers=headers)
        assert response.status_code == status, (path, response.text)
    assert gateway.fake.adapters == {"policy-v1000000": "/tmp/evil-adapter"}


@pytest.mark.parametrize("path", ["/health", "/metrics"])
async def test_health_and_metrics_stay_open(gateway, path):
    assert (await gateway.agent.get(path)).status_code == 200


async def test_metrics_carry_only_aggregate_counters(gateway):
    ids = await victim(gateway)
    await gateway.agent.post(f"/r/{ids['token']}x/v1/chat/completions", json=chat_body())  # a refused call
    named = {**chat_body(), "model": "agent-chosen-model-name"}  # served (as the policy), counted, never a label
    assert (await gateway.agent.post(f"/r/{ids['token']}/v1/chat/completions", json=named)).status_code == 200
    text = (await gateway.agent.get("/metrics")).text
    assert "agent-chosen-model-name" not in text and "harnessrl_turns_total" in text
    labels = set(re.findall(r'(\w+)="', text))
    # harness: a rollout's, set through the control plane; link: one of a fixed few (gateway.recording.callgraph)
    # policy: names the control plane chose (runs, keys), never an agent; few, like engines
    # capture: a run's capture mode (store.capture_modes: engine | tito), the roles' unknown counter's
    fixed = {"dialect", "status", "kind", "dtype", "le", "reason", "engine", "harness", "link", "policy", "capture"}
    assert labels <= fixed, labels
    assert set(re.findall(r'engine="([^"]*)"', text)) == {"0"}  # an engine by its position, never its address
    engine_url = gateway.app.state.gateway.engine.engines()[0]["url"]
    for secret in (ids["token"], "test-run", "task-1", TEST_ADMIN_KEY, engine_url):
        assert secret not in text


async def test_the_viewer_shell_loads_without_the_key_but_its_data_does_not(gateway):
    page = await gateway.agent.get("/ui/")
    assert page.status_code == 200 and "js/app.js" in page.text
    assert (await gateway.agent.get("/ui/js/api.js")).status_code == 200
    assert (await gateway.agent.get("/api/runs", params={"order": "desc"})).status_code == 401
