"""A streamed engine answer: its Server-Sent Events parsed as they arrive, until ``[DONE]``.

The body comes from the lean connection (``gateway.engine.http1.LeanStream``) or from an aiohttp
response (``AiohttpBody``); both are a ``StreamBody``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import aiohttp

from gateway.engine.failures import engine_failed, logged
from gateway.engine.http1 import BrokenAnswer
from gateway.engine.token_prefix import loads_answer
from gateway.errors import EngineError, EngineTimeout, EngineUnavailable


class EngineStream:
    """The chunks of one streamed engine answer (Server-Sent Events), parsed, until ``[DONE]``.

    ``batches`` yields the chunks that arrived together as one list, so a busy gateway translates and
    sends them in one go (one write to the client instead of one per token); iterating the stream
    yields chunk by chunk. An ``{"error": ...}`` event (vLLM's way to fail a stream that already
    started) raises ``EngineError``. ``close`` before the end drops the connection: vLLM aborts the
    request.
    """

    def __init__(self, body: StreamBody, base_url: str):
        self._body, self._base_url = body, base_url
        self.done = False  # [DONE] was read

    async def __aiter__(self) -> AsyncIterator[dict]:
        async for batch in self.batches():
            for chunk in batch:
                yield chunk

    async def batches(self) -> AsyncIterator[list[dict]]:
        pending = b""
        try:
            while not self.done:
                data = await self._body.readany()
                if not data:
                    if pending.strip():
                        raise EngineError(502, "engine: the stream ended inside an event", "engine_error")
                    return
                pending += data
                events, _, pending = pending.rpartition(b"\n\n")
                if batch := self._parsed(events):
                    yield batch
            while await self._body.readany():
                pass  # past [DONE]: read to the end, so the connection goes back to the pool
        except (aiohttp.ClientError, BrokenAnswer) as exc:
            raise logged(
                EngineUnavailable(f"the engine broke off a stream: {type(exc).__name__}"), self._base_url, exc
            ) from exc
        except TimeoutError as exc:
            raise logged(
                EngineTimeout("the engine stopped streaming (no chunk within the engine timeout)"), self._base_url, exc
            ) from exc
        finally:
            self.close()

    def _parsed(self, events: bytes) -> list[dict]:
        batch = []
        for line in events.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                break
            chunk = loads_answer(data)  # the first chunk carries the prompt ids
            if "error" in chunk and "choices" not in chunk:
                error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": chunk["error"]}
                raise engine_failed("an error event in its stream", str(error.get("message")))
            batch.append(chunk)
        return batch

    def close(self) -> None:
        """Release the connection; one closed mid-answer is dropped (the engine aborts the request)."""
        if self.done and self._body.at_eof():
            self._body.release()
        else:
            self._body.close()


class StreamBody(Protocol):
    """A streamed answer's body: ``gateway.engine.http1.LeanStream``, or an aiohttp response's."""

    async def readany(self) -> bytes: ...
    def at_eof(self) -> bool: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


class AiohttpBody:
    """An aiohttp response's body as a ``StreamBody``."""

    def __init__(self, response: aiohttp.ClientResponse):
        self._response = response

    async def readany(self) -> bytes:
        return await self._response.content.readany()

    def at_eof(self) -> bool:
        return self._response.content.at_eof()

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()
