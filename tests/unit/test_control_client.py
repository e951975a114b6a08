"""The one control-plane transport: transport errors and 503s retried with bounded backoff, anything
else answered at once, and an unreachable gateway named with the fix."""

from __future__ import annotations

import httpx
import pytest

from contracts.gateway_client import Backoff, GatewayClient, GatewayRefused, GatewayUnreachable, send

URL = "http://gateway.test"


def scripted(*answers) -> tuple[httpx.AsyncClient, list[str]]:
    """A client whose transport gives ``answers`` in order: a status code, or an exception to raise."""
    transport, seen = scripted_transport(*answers)
    return httpx.AsyncClient(transport=transport), seen


def scripted_transport(*answers) -> tuple[httpx.MockTransport, list[str]]:
    seen: list[str] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer, json={"ok": answer})

    return httpx.MockTransport(handle), seen


async def no_sleep(_: float) -> None:
    pass


async def test_transport_errors_and_503s_are_retried_until_an_answer():
    client, seen = scripted(httpx.ConnectError("refused"), 503, httpx.ReadTimeout("slow"), 200)
    attempts, response = await send(
        client, "GET", URL + "/admin/policy", Backoff(retries=3), "start it", sleep=no_sleep
    )
    assert (attempts, response.status_code, len(seen)) == (4, 200, 4)


async def test_other_errors_are_answered_at_once():
    client, seen = scripted(409, 200)
    attempts, response = await send(client, "POST", URL + "/admin/adapters", Backoff(retries=3), "x", sleep=no_sleep)
    assert (attempts, response.status_code, seen) == (1, 409, ["POST /admin/adapters"])


async def test_retries_are_bounded_and_the_error_names_the_fix():
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)

    client, seen = scripted(*[httpx.ConnectError("refused")] * 4)
    with pytest.raises(GatewayUnreachable, match="harnessrl serve"):
        await send(
            client,
            "GET",
            URL + "/api/runs",
            Backoff(retries=3, first_s=0.5, max_s=1.0),
            "start it with `harnessrl serve`",
            sleep=sleep,
        )
    assert len(seen) == 4 and delays == [0.5, 1.0, 1.0]
    client, _ = scripted(503, 503)
    _, last = await send(client, "GET", URL + "/api/runs", Backoff(retries=1), "x", sleep=no_sleep)
    assert last.status_code == 503  # a last 503 is the caller's to report


async def test_the_runner_client_names_refusals_and_unreachable_gateways(monkeypatch):
    monkeypatch.setattr("contracts.gateway_client.BACKOFF", Backoff(retries=0))
    with pytest.raises(GatewayRefused, match="pass --admin-key"):
        await GatewayClient(URL, transport=scripted_transport(401)[0]).policy()
    with pytest.raises(GatewayUnreachable, match="--gateway URL"):
        await GatewayClient(URL, transport=scripted_transport(httpx.ConnectError("refused"))[0]).policy()


def scripted_with_headers(*answers) -> tuple[httpx.MockTransport, list[str]]:
    """Like ``scripted_transport``; an answer may be (status, headers)."""
    seen: list[str] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        status, headers = queue.pop(0)
        return httpx.Response(status, json={"id": 7, "status": "finished"}, headers=headers)

    return httpx.MockTransport(handle), seen


async def test_a_503_is_retried_after_its_retry_after_bounded_by_the_backoff():
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)

    transport, _ = scripted_with_headers(
        (503, {"retry-after": "2"}), (503, {"retry-after": "60"}), (503, {}), (200, {})
    )
    async with httpx.AsyncClient(transport=transport) as client:
        attempts, response = await send(
            client, "POST", URL + "/api/rollouts/7/end", Backoff(retries=3, first_s=0.1, max_s=5.0), "x", sleep=sleep
        )
    assert (attempts, response.status_code) == (4, 200)
    assert delays == [2.0, 5.0, 0.4]  # Retry-After when longer than the backoff's wait, never past its longest


async def test_ending_a_rollout_with_rewards_is_retried_when_the_store_was_locked(monkeypatch):
    # A 503 wrote nothing (the store's transaction failed), and a repeat that lands after a lost answer
    # is a 409 "already ended" the client resolves: ending with rewards is safe to repeat.
    monkeypatch.setattr("contracts.gateway_client.BACKOFF", Backoff(retries=2, first_s=0.0))
    transport, seen = scripted_with_headers((503, {"retry-after": "0"}), (200, {}))
    client = GatewayClient(URL, transport=transport)
    ended = await client.end_rollout(7, "finished", None, {"verifier": 1.0})
    assert ended["status"] == "finished" and seen == ["POST /api/rollouts/7/end"] * 2
