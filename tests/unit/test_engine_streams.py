"""A streamed engine answer on the lean connection: read as it comes, its connection reused or dropped."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.engine.client import VLLMEngineClient
from gateway.errors import EngineError, EngineUnavailable
from tests.waiting import until

CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "token_ids": [7]}]}\n\n'
DONE = b"data: [DONE]\n\n"


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


async def streaming_server(script: list[str]):
    """A kept-alive engine streaming each POST's answer by the next step of ``script``: ``ok`` (two
    chunks and [DONE], the second sent after the client read the first), ``error`` (a 400, whole),
    ``broken`` (one chunk, then closed), ``long`` (chunks until the client goes away)."""
    seen = {"connections": 0, "requests": 0, "client_left": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]))
                seen["requests"] += 1
                step = script.pop(0) if script else "ok"
                if step == "error":
                    body = json.dumps({"error": {"message": "bad temperature", "type": "BadRequestError"}}).encode()
                    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                writer.write(chunked(CHUNK))
                await writer.drain()
                if step == "broken":
                    writer.close()
                    return
                if step == "long":
                    while True:
                        await asyncio.sleep(0.01)
                        writer.write(chunked(CHUNK))
                        await writer.drain()
                writer.write(chunked(CHUNK, DONE) + b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            seen["client_left"] += 1
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


async def read_stream(engine: VLLMEngineClient, chunks: int | None = None) -> list[dict]:
    """The stream's chunks (only the first ``chunks``, then it is closed)."""
    stream = await engine.chat_stream({"model": "base", "messages": [], "stream": True})
    got = []
    async for chunk in stream:
        got.append(chunk)
        if chunks is not None and len(got) == chunks:
            stream.close()
            break
    return got


async def test_streams_read_to_their_end_reuse_one_connection():
    server, url, seen = await streaming_server(["ok", "ok"])
    engine = VLLMEngineClient(url)
    try:
        for _ in range(2):
            assert [c["choices"][0]["token_ids"] for c in await read_stream(engine)] == [[7], [7]]
        assert seen["connections"] == 1 and seen["requests"] == 2
    finally:
        await engine.close()
        server.close()


async def test_a_stream_closed_early_drops_its_connection_so_the_engine_aborts():
    server, url, seen = await streaming_server(["long", "ok"])
    engine = VLLMEngineClient(url)
    try:
        assert len(await read_stream(engine, chunks=3)) == 3
        assert len(await read_stream(engine)) == 2  # on a fresh connection
        assert seen["connections"] == 2
        await until(lambda: seen["client_left"] == 1, "the engine to see the closed stream's client leave")
    finally:
        await engine.close()
        server.close()


async def test_a_refused_stream_is_the_engines_error_and_a_broken_one_is_the_engine_failing():
    server, url, _ = await streaming_server(["error", "broken"])
    engine = VLLMEngineClient(url)
    try:
        with pytest.raises(EngineError, match="bad temperature") as refused:
            await read_stream(engine)
        assert refused.value.status_code == 400
        with pytest.raises(EngineUnavailable, match="broke off a stream"):
            await read_stream(engine)
    finally:
        await engine.close()
        server.close()
