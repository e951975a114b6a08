"""A call whose client went away before its response was sent is tagged ``undelivered`` and is no
training sample; the agent never saw it."""

from __future__ import annotations

import asyncio
import json
import socket

import anyio
import httpx
import pytest
from starlette.responses import JSONResponse

from gateway.app import create_app
from gateway.delivery.tracking import Delivery, EventStream, client_gone
from harnessrl.server import BackgroundServer
from tests.builders import ADMIN_HEADERS, chat_body, gateway_settings
from tests.fake_tokens import encode
from tests.waiting import until


def send_and_hang_up(url: str, path: str, body: dict, after_s: float) -> None:
    """An HTTP request whose client closes the connection before the answer comes."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        sock.settimeout(after_s)
        with pytest.raises(TimeoutError):
            sock.recv(1)  # nothing yet: the engine is still working


async def calls_of(http: httpx.AsyncClient, rollout_id: int, count: int, tagged_from: int = 1) -> list[dict]:
    """The rollout's calls once ``count`` are recorded and those from ``tagged_from`` on are tagged (a
    call is tagged after its commit, so seeing it recorded is not enough)."""

    async def recorded() -> list[dict] | None:
        calls = (await http.get(f"/api/rollouts/{rollout_id}/calls", params={"tokens": "false"})).json()["data"]
        return calls if len(calls) >= count and all(c["tags"] for c in calls[tagged_from:]) else None

    return await until(recorded, f"{count} calls recorded and tagged", interval_s=0.05)


@pytest.fixture
def served_gateway(sqlite_db, fake_engine, fake_engine_server):
    """The gateway on a real uvicorn socket: only a real server sees a client hang up."""
    settings = gateway_settings(sqlite_db, fake_engine_server.url, require_token=True)
    with BackgroundServer(create_app(settings)) as server:
        yield server


@pytest.mark.parametrize("stream", [False])
async def test_call_whose_client_hung_up_is_tagged_undelivered_and_left_out_of_samples(
    served_gateway, fake_engine, stream
):
    async with httpx.AsyncClient(base_url=served_gateway.url, headers=ADMIN_HEADERS, timeout=60) as http:
        rollout = (await http.post("/api/rollouts", json={"run": "r", "task": "t"})).json()
        path = f"/r/{rollout['token']}/v1/chat/completions"
        delivered = await http.post(path, json=chat_body("first", stream=stream))
        assert delivered.status_code == 200
        fake_engine.delay_s = 0.6
        prompt = chat_body("first", stream=stream)
        prompt["messages"] += [
            {"role": "assistant", "content": "Hello from the fake engine."},
            {"role": "user", "content": "second"},
        ]
        await asyncio.to_thread(send_and_hang_up, served_gateway.url, path, prompt, 0.2)

        calls = await calls_of(http, rollout["id"], 2)
        assert [c["tags"] for c in calls] == [[], ["undelivered"]]
        assert calls[1]["parent_id"] == calls[0]["id"]  # recorded as it was: it did extend the first
        for include_side in ("false", "true"):
            samples = (
                await http.get(f"/api/rollouts/{rollout['id']}/samples", params={"include_side": include_side})
            ).json()["data"]
            assert [s["call_ids"] for s in samples] == [[calls[0]["id"]]]


def read_then_hang_up(url: str, path: str, body: dict, until: bytes) -> bytes:
    """A streaming request whose client closes the connection once ``until`` arrived, mid-answer."""
    host, port = url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    received = b""
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        sock.settimeout(60)  # a guard against hanging: a busy machine may be slow to send the first chunks
        while until not in received:
            received += sock.recv(65536)
    return received


async def test_stream_whose_client_leaves_midway_cancels_the_engine_and_records_the_part_sent(
    served_gateway, fake_engine
):
    # 28 chunks: the client leaves after the first few, seconds before the end even on a busy machine
    fake_engine.token_delay_s = 0.25
    async with httpx.AsyncClient(base_url=served_gateway.url, headers=ADMIN_HEADERS, timeout=60) as http:
        rollout = (await http.post("/api/rollouts", json={"run": "r", "task": "t"})).json()
        path = f"/r/{rollout['token']}/v1/chat/completions"
        received = await asyncio.to_thread(
            read_then_hang_up, served_gateway.url, path, chat_body("first", stream=True), b'"content":"H"'
        )
        assert b"[DONE]" not in received
        calls = await calls_of(http, rollout["id"], 1, tagged_from=0)
        assert [c["tags"] for c in calls] == [["undelivered"]]
        call = (await http.get(f"/api/calls/{calls[0]['id']}")).json()
        sampled = encode("Hello from the fake engine.")
        assert 1 <= len(call["output_ids"]) < len(sampled)  # what had been sampled when the client left
        assert call["output_ids"] == sampled[: len(call["output_ids"])]
        assert len(call["output_logprobs"]) == len(call["output_ids"])
        await until(lambda: fake_engine.streams_aborted, "the engine stream to be aborted")
        assert fake_engine.streams_aborted == 1  # the engine request was cancelled, not run to its end
        samples = (await http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
        assert samples == []


async def run_response(response, receive, send) -> list[str]:
    tagged: list[str] = []

    async def tag() -> None:
        tagged.append("undelivered")

    await Delivery(response, tag)({"type": "http", "asgi": {"spec_version": "2.3"}}, receive, send)
    return tagged


async def never_disconnects() -> dict:
    await anyio.sleep_forever()


async def test_stream_whose_send_fails_midway_is_undelivered():
    sent: list[dict] = []

    async def failing_send(message: dict) -> None:
        if len(sent) == 2:
            raise OSError("connection reset by peer")
        sent.append(message)

    async def chunks():
        for n in range(5):
            yield f"data: {n}\n\n"

    assert await run_response(EventStream(chunks()), never_disconnects, failing_send) == ["undelivered"]


async def test_response_sent_whole_is_not_tagged():
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    assert await run_response(JSONResponse({"ok": True}), never_disconnects, send) == []
    assert sent[-1]["type"] == "http.response.body" and not sent[-1].get("more_body")


async def test_json_response_is_not_sent_to_a_client_that_already_left():
    sent: list[dict] = []

    async def gone() -> dict:
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    assert await run_response(JSONResponse({"ok": True}), gone, send) == ["undelivered"]
    assert sent == []


async def test_stream_whose_client_leaves_after_the_last_chunk_is_delivered():
    """Clients close as soon as they read the final event; the empty end-of-body message that follows
    may then find them gone. Every chunk reached them: the call was delivered."""
    sent: list[dict] = []
    last_chunk_sent = anyio.Event()

    async def leaves_after_the_last_chunk() -> dict:
        await last_chunk_sent.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message.get("body") == b"" and not message.get("more_body"):
            await anyio.sleep(0.05)  # a busy server: the hang-up arrives before the end-of-body goes out
        sent.append(message)
        if message.get("body") == b"data: [DONE]\n\n":
            last_chunk_sent.set()

    async def chunks():
        for event in ("data: 1\n\n", "data: [DONE]\n\n"):
            yield event

    assert await run_response(EventStream(chunks()), leaves_after_the_last_chunk, send) == []


async def test_stream_whose_client_leaves_while_it_waits_stops_its_iteration_and_is_undelivered():
    """The engine has not sent the next chunk yet when the client hangs up: the iteration is cancelled
    (its finally closes the engine stream) and the call is tagged, with no later cancellation leaking
    into the task that served it."""
    sent: list[dict] = []
    closed = asyncio.Event()
    first_out = asyncio.Event()

    async def leaves_after_the_first_chunk() -> dict:
        await first_out.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        if message.get("body"):
            first_out.set()

    async def chunks():
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(30)  # the engine, still sampling
            yield b"data: 2\n\n"
        finally:
            closed.set()

    assert await run_response(EventStream(chunks()), leaves_after_the_first_chunk, send) == ["undelivered"]
    assert closed.is_set() and [m.get("body") for m in sent[1:]] == [b"data: 1\n\n"]
    await asyncio.sleep(0.01)  # still running: the served task was not left cancelled


async def test_a_disconnect_check_with_nothing_waiting_leaves_no_wait_behind():
    messages: asyncio.Queue[dict] = asyncio.Queue()
    assert client_gone(messages.get) is False  # nothing there: the wait is dropped, not left pending
    await messages.put({"type": "http.disconnect"})
    assert await asyncio.wait_for(messages.get(), 1) == {"type": "http.disconnect"}  # nobody stole it
    await messages.put({"type": "http.disconnect"})
    assert client_gone(messages.get) is True
