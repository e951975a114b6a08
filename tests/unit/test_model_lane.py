"""Model routes go straight to their endpoints; what they raise is answered as the app's handlers answer it."""

from __future__ import annotations

from gateway.boundary.model_lane import ModelLane, model_endpoints
from gateway.dialects import API_PREFIXES, CHAT, COMPLETIONS, MESSAGES, RESPONSES
from tests.unit.test_errors import assert_openai_error


def test_the_lane_serves_every_dialects_model_routes_under_both_prefixes_and_no_other(gateway):
    table = model_endpoints(gateway.app.routes)
    for dialect in (CHAT, COMPLETIONS, MESSAGES, RESPONSES):
        for prefix in API_PREFIXES:
            for route in dialect.routes:
                assert f"{prefix}{route}" in table
    assert not [path for path in table if path.startswith(("/api", "/admin", "/ui"))]
    assert "/r/{token}/v1/tools/mcp" not in table  # its endpoint takes more than (request, state)


async def test_a_rollouts_call_reaches_its_endpoint_through_the_lane(gateway, monkeypatch):
    served = []
    real = ModelLane._endpoint

    def noting(self, scope):
        endpoint = real(self, scope)
        served.append((scope["path"], endpoint is not None, scope.get("path_params")))
        return endpoint

    monkeypatch.setattr(ModelLane, "_endpoint", noting)
    rollout = await gateway.new_rollout()
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    response = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert (f"/r/{rollout['token']}/v1/chat/completions", True, {"token": rollout["token"]}) in served
    assert ("/api/rollouts", False, None) in served  # the control plane goes on to the app


async def test_errors_on_the_lane_come_in_the_dialects_shape_as_before(gateway):
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    unknown = await gateway.agent.post("/r/not-a-token/v1/chat/completions", json=body)
    assert assert_openai_error(unknown, 401)["message"]
    bad = await gateway.agent.post("/v1/chat/completions", json={"model": "policy", "messages": "nope"})
    assert assert_openai_error(bad, 400)["param"]
    anthropic = await gateway.agent.post("/r/not-a-token/v1/messages", json={"model": "policy", "max_tokens": 8})
    assert anthropic.status_code == 401 and anthropic.json()["type"] == "error"


async def test_what_the_lane_does_not_serve_the_app_still_does(gateway):
    assert (await gateway.agent.get("/v1/chat/completions")).status_code == 405
    assert (await gateway.agent.post("/r//v1/chat/completions", json={})).status_code == 404
    assert (await gateway.agent.get("/v1/models")).status_code == 200
