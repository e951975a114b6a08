"""The engine client's transport behaviour against a raw socket server that misbehaves on cue."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest

from gateway.engine.client import KEEPALIVE_S, VLLMEngineClient
from gateway.errors import EngineUnavailable

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
