"""HostGuard (gateway/boundary/host_guard.py): a Host this gateway does not serve is a 421 before the
app runs (DNS rebinding); its own names, and any with "*", pass."""

from __future__ import annotations

from gateway.boundary import HostGuard
from tests.asgi_calls import Recorded, call, http_scope, ok_app

SERVED = frozenset({"127.0.0.1", "localhost"})


async def test_a_host_the_gateway_does_not_serve_is_421_and_the_app_never_runs():
    recorded = Recorded()
    scope = http_scope("/v1/chat/completions", {"host": "attacker.example:8000"})
    await call(HostGuard(ok_app(recorded), SERVED), scope, recorded)
    assert (recorded.status, recorded.reached) == (421, False)
    assert recorded.body["error"]["code"] == "host_not_allowed"


async def test_the_gateways_own_names_pass():
    for host, served in (("localhost:8000", SERVED), ("anything.example", frozenset({"*"}))):
        recorded = Recorded()
        await call(HostGuard(ok_app(recorded), served), http_scope("/v1/models", {"host": host}), recorded)
        assert (recorded.status, recorded.reached) == (200, True)
