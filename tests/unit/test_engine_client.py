"""The engine client's transport behaviour against a raw socket server that misbehaves on cue."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest

from gateway.engine.client import KEEPALIVE_S, VLLMEngineClient
from gateway.errors import EngineTimeout, EngineUnavailable

MODELS = json.dumps({"object": "list", "data": [{"id": "base", "object": "model"}]}).encode()


async def raw_server(drops: int):
    """Answers GET /v1/models; the first ``drops`` connections are reset after the request arrives,
    as a keep-alive connection the engine closed while idle looks to the client."""
    left = {"drops": drops, "connections": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        left["connections"] += 1
        await reader.readuntil(b"\r\n\r\n")
        if left["drops"] > 0:
            left["drops"] -= 1
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
            writer.close()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(MODELS), MODELS)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", left


async def test_a_connection_the_engine_drops_is_retried_on_a_fresh_one():
    server, url, seen = await raw_server(drops=2)
    client = VLLMEngineClient(url)
    try:
        assert [m["id"] for m in await client.models()] == ["base"]
        assert seen["connections"] == 3
    finally:
        await client.close()
        server.close()


async def test_an_engine_that_keeps_dropping_is_reported_unavailable_with_the_fix():
    server, url, _ = await raw_server(drops=100)
    client = VLLMEngineClient(url)
    try:
        with pytest.raises(EngineUnavailable, match="harnessrl serve"):
            await client.models()
    finally:
        await client.close()
        server.close()


def test_pooled_connections_expire_before_vllms_idle_timeout():
    import vllm.envs  # noqa: PLC0415 - the engine's own default, not a copy of it

    assert KEEPALIVE_S < vllm.envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE


ANSWER = json.dumps({"choices": [{"message": {"content": "hi"}, "token_ids": [1]}], "prompt_token_ids": [5]}).encode()


async def answering_server(script: list[str]):
    """A kept-alive engine for POSTs, each answered by the next step of ``script``: ``ok`` (a length),
    ``chunked``, ``close`` (ok, then ``connection: close``), ``drop`` (reset before answering),
    ``half`` (half the body, then closed), ``hang`` (never answers)."""
    seen = {"connections": 0, "requests": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                seen["requests"] += 1
                step = script.pop(0) if script else "ok"
                if step == "drop":
                    writer.get_extra_info("socket").setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    writer.close()
                    return
                if step == "hang":
                    await reader.read()  # until the client gives up and closes
                    return
                if step == "chunked":
                    half = len(ANSWER) // 2
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                        % (half, ANSWER[:half], len(ANSWER) - half, ANSWER[half:])
                    )
                else:
                    close = b"connection: close\r\n" if step == "close" else b""
                    body = ANSWER[: len(ANSWER) // 2] if step == "half" else ANSWER
                    writer.write(b"HTTP/1.1 200 OK\r\n%scontent-length: %d\r\n\r\n%s" % (close, len(ANSWER), body))
                await writer.drain()
                if step in ("close", "half"):
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


async def chat_calls(url: str, count: int, **client) -> list[dict]:
    engine = VLLMEngineClient(url, **client)
    try:
        return [await engine.chat({"model": "base", "messages": []}) for _ in range(count)]
    finally:
        await engine.close()


async def test_answered_calls_reuse_one_kept_alive_connection_and_read_chunked_answers_whole():
    server, url, seen = await answering_server(["ok", "chunked", "ok"])
    try:
        answers = await chat_calls(url, 3)
        assert all(a["choices"][0]["message"]["content"] == "hi" for a in answers)
        assert seen == {"connections": 1, "requests": 3}
    finally:
        server.close()


async def test_a_connection_the_engine_closes_is_not_reused_and_a_drop_is_retried_fresh():
    server, url, seen = await answering_server(["close", "drop", "ok"])
    try:
        assert len(await chat_calls(url, 2)) == 2
        assert seen == {"connections": 3, "requests": 3}  # close: a new one; drop: retried on another
    finally:
        server.close()


async def test_an_answer_broken_off_is_the_engine_failing_and_is_not_sent_again():
    server, url, seen = await answering_server(["half"])
    try:
        with pytest.raises(EngineUnavailable, match="the engine failed: BrokenAnswer"):
            await chat_calls(url, 1)
        assert seen["requests"] == 1
    finally:
        server.close()


async def test_an_engine_that_never_answers_times_out_with_the_fix():
    server, url, _ = await answering_server(["hang"])
    try:
        with pytest.raises(EngineTimeout, match="--engine-timeout"):
            await chat_calls(url, 1, timeout_s=0.2)
    finally:
        server.close()


async def test_an_engine_that_refuses_connections_is_unreachable_with_the_fix():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # bound, never listening: refused
        with pytest.raises(EngineUnavailable, match="unreachable after 4 attempts"):
            await chat_calls(url, 1)
