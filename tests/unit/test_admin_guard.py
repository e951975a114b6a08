"""AdminGuard (gateway/boundary/admin_guard.py): every path under /api or /admin needs the admin key,
decided on the raw path; the model endpoints and look-alike paths are not the control plane."""

from __future__ import annotations

import pytest

from gateway.boundary import AdminGuard, is_control_plane
from tests.asgi_calls import Recorded, call, http_scope, ok_app

KEY = "the-admin-key"


@pytest.mark.parametrize("path", ["/api", "/api/rollouts", "/admin/adapters", "/api/not/a/route/yet"])
async def test_the_control_plane_without_the_key_is_401_and_the_app_never_runs(path):
    recorded = Recorded()
    await call(
        AdminGuard(ok_app(recorded), KEY), http_scope(path, {"authorization": "Bearer hrl-a-rollout-token"}), recorded
    )
    assert (recorded.status, recorded.reached) == (401, False)


async def test_the_key_opens_it():
    recorded = Recorded()
    await call(AdminGuard(ok_app(recorded), KEY), http_scope("/api/rollouts", {"x-admin-key": KEY}), recorded)
    assert (recorded.status, recorded.reached) == (200, True)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/r/hrl-x/v1/messages", "/apis", "/administer", "/health"])
async def test_other_paths_are_not_the_control_plane(path):
    assert not is_control_plane(path)
    recorded = Recorded()
    await call(AdminGuard(ok_app(recorded), KEY), http_scope(path), recorded)
    assert recorded.reached
