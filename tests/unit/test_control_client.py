"""The one control-plane transport: transport errors and 503s retried with bounded backoff, anything
else answered at once, and an unreachable gateway named with the fix."""

from __future__ import annotations

import httpx
import pytest

from gateway.control_client import Backoff, GatewayUnreachable, send
from harnesses.gateway_client import GatewayClient, GatewayRefused

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
    monkeypatch.setattr("harnesses.gateway_client.BACKOFF", Backoff(retries=0))
    with pytest.raises(GatewayRefused, match="pass --admin-key"):
        await GatewayClient(URL, transport=scripted_transport(401)[0]).policy()
    with pytest.raises(GatewayUnreachable, match="--gateway URL"):
        await GatewayClient(URL, transport=scripted_transport(httpx.ConnectError("refused"))[0]).policy()
