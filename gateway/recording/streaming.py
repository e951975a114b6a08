"""Stream-through: an engine's streamed chat answer, passed on chunk by chunk and recorded whole.

``StreamedCall.chunks`` yields the engine's ``chat.completion.chunk`` bodies as they arrive, while
``ChatAssembler`` gathers them into the ``chat.completion`` body a non-streaming call would have
returned (the exact prompt and sampled ids, the sampled logprobs, content, reasoning, tool calls).
A tito call streams the same chunks, made from the engine's completions stream
(``gateway.tito.stream``); the Completions route streams ``text_completion`` chunks, gathered by
``CompletionAssembler``.
When the engine's stream ends the call is recorded, and only then ``Committed`` is yielded: dialects
hold their stream's last events until it comes, so what a client fully received is durable. A call
that cannot be recorded raises a ``GatewayError`` instead (a 503 for a store that is full or locked),
which every dialect's stream sends as its error event.

A stream the client leaves early is closed (the engine aborts the request) and ``undelivered``
records what was sampled so far, tagged ``undelivered``; a call already committed is only tagged.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Protocol

from gateway.engine.token_prefix import TokenIds, token_count
from gateway.errors import EngineError, PayloadTooLarge, failure_of

# An SSE comment every dialect's stream carries with its last events: the call id (its HTTP header goes
# out before the call exists).
CALL_ID_COMMENT = ": x-harnessrl-call-id {}\n\n"


@dataclass(frozen=True)
class Committed:
    """The stream's end: the call is committed under ``call_id``; ``answer`` is the whole body."""

    call_id: int
    answer: dict  # chat.completion (text_completion on the Completions route), as unstreamed


@dataclass
class ChatAssembler:
    """The pieces of a streamed chat answer, put back together."""

    prompt_ids: TokenIds | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[dict] = field(default_factory=list)  # logprobs.content entries, one per sampled token
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict] = field(default_factory=dict)  # by the deltas' index
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    usage: dict | None = None
    head: dict = field(default_factory=dict)  # id, created, model of the first chunk

    def add(self, chunk: dict) -> None:
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_ids = chunk["prompt_token_ids"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                raise EngineError(502, "engine streamed more than one choice, expected 1")
            self._add_choice(choice)

    def _add_choice(self, choice: dict) -> None:
        self.output_ids += choice.get("token_ids") or ()
        self.logprobs += (choice.get("logprobs") or {}).get("content") or ()
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self.content.append(delta["content"])
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        if reasoning:
            self.reasoning.append(reasoning)
        for call in delta.get("tool_calls") or ():
            self._add_tool_call(call)
        if choice.get("finish_reason") is not None:
            self.finish_reason, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")

    def _add_tool_call(self, delta: dict) -> None:
        call = self.tool_calls.setdefault(
            delta.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        call["id"] = call["id"] or delta.get("id")
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def answer(self) -> dict:
        """The ``chat.completion`` body of what was streamed (so far)."""
        calls = [
            {**call, "id": call["id"] or f"chatcmpl-tool-{secrets.token_hex(8)}"}
            for _, call in sorted(self.tool_calls.items())
        ]
        message = {
            "role": "assistant",
            "content": "".join(self.content) or None,
            "tool_calls": calls,
            "reasoning": "".join(self.reasoning) or None,
        }
        usage = self.usage or counted_usage(self.prompt_ids, self.output_ids)
        return {
            "id": self.head.get("id"),
            "object": "chat.completion",
            "created": self.head.get("created") or int(time.time()),
            "model": self.head.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": {"content": self.logprobs},
                    "finish_reason": self.finish_reason,
                    "stop_reason": self.stop_reason,
                    "token_ids": self.output_ids,
                }
            ],
            "usage": usage,
            "prompt_token_ids": self.prompt_ids,
        }


def counted_usage(prompt_ids: TokenIds | None, output_ids: list[int]) -> dict:
    """The usage block of a stream whose engine sent none, counted from the ids."""
    prompt = token_count(prompt_ids)
    return {"prompt_tokens": prompt, "completion_tokens": len(output_ids), "total_tokens": prompt + len(output_ids)}


@dataclass
class CompletionAssembler:
    """The pieces of a streamed ``text_completion`` (the Completions route), put back together."""

    prompt_ids: TokenIds | None = None
    output_ids: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    logprobs: dict[str, list] = field(
        default_factory=lambda: {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    )
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    usage: dict | None = None
    head: dict = field(default_factory=dict)

    def add(self, chunk: dict) -> None:
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                raise EngineError(502, "engine streamed more than one choice, expected 1")
            if choice.get("prompt_token_ids") is not None:
                self.prompt_ids = choice["prompt_token_ids"]
            self.output_ids += choice.get("token_ids") or ()
            self.text.append(choice.get("text") or "")
            for key, values in (choice.get("logprobs") or {}).items():
                self.logprobs.setdefault(key, []).extend(values or ())
            if choice.get("finish_reason") is not None:
                self.finish_reason, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")

    def answer(self) -> dict:
        """The ``text_completion`` body of what was streamed (so far)."""
        usage = self.usage or counted_usage(self.prompt_ids, self.output_ids)
        return {
            "id": self.head.get("id"),
            "object": "text_completion",
            "created": self.head.get("created") or int(time.time()),
            "model": self.head.get("model"),
            "choices": [
                {
                    "index": 0,
                    "text": "".join(self.text),
                    "logprobs": self.logprobs,
                    "finish_reason": self.finish_reason,
                    "stop_reason": self.stop_reason,
                    "prompt_token_ids": self.prompt_ids,
                    "token_ids": self.output_ids,
                }
            ],
            "usage": usage,
        }


class ChunkStream(Protocol):
    """An engine's streamed answer (``EngineStream``, or tito's chat chunks made of one)."""

    def batches(self) -> AsyncIterator[list[dict]]: ...
    def close(self) -> None: ...


# How a finished (or cut) stream is recorded: the pipeline's commit of an answer, with extra tags.
Commit = Callable[[dict, float, list[str]], Awaitable[int]]


class StreamedCall:
    """One engine stream, passed through and recorded (``chunks``), or recorded cut (``undelivered``)."""

    def __init__(
        self,
        stream: ChunkStream,
        commit: Commit,
        timers: ExitStack,
        on_tag: Callable[[int, str], Awaitable[None]],
        assembler: ChatAssembler | CompletionAssembler | None = None,
    ):
        self._stream, self._commit, self._timers, self._on_tag = stream, commit, timers, on_tag
        self.assembler = assembler or ChatAssembler()
        self._started = time.perf_counter()
        self._latency_ms: float | None = None
        self._committing: asyncio.Future[int] | None = None

    async def chunks(self) -> AsyncIterator[list[dict] | Committed]:
        """The engine's chunks, in the batches they arrived in, then ``Committed``."""
        pending: list[dict] | None = None  # a batch passed on: gathered once the client was sent it
        try:
            async for batch in self._stream.batches():
                pending = batch
                yield batch  # first: the client's write does not wait for the bookkeeping
                pending = None
                self._gather(batch)
        finally:
            if pending is not None:  # the client was being sent it when it left (or the end came)
                self._gather(pending)
            self._stop()
        answer = self.assembler.answer()
        # Shielded: a client leaving now must not leave the commit half done (``undelivered`` awaits it).
        self._committing = asyncio.ensure_future(self._commit(answer, self._latency_ms, []))
        try:
            call_id = await asyncio.shield(self._committing)
        except Exception as exc:  # not recorded (disk full, store locked): the dialect's error event says so
            raise failure_of(exc, "committing a streamed call") from exc
        yield Committed(call_id, answer)

    def _gather(self, batch: list[dict]) -> None:
        for chunk in batch:
            self.assembler.add(chunk)

    async def undelivered(self, tag: str) -> None:
        """The client did not get the whole answer: tag the committed call, or record the cut one."""
        self._stop()
        if self._committing is not None:
            await self._on_tag(await self._committing, tag)
        elif self.assembler.prompt_ids is not None:
            self.assembler.finish_reason = self.assembler.finish_reason or "abort"
            try:
                await self._commit(self.assembler.answer(), self._latency_ms, [tag])
            except PayloadTooLarge:  # past its rollout's byte budget: not recorded, and no client to tell
                pass

    def _stop(self) -> None:
        """The engine part is over: drop its connection if still open, stop its clocks (once)."""
        self._stream.close()
        if self._latency_ms is None:
            self._latency_ms = (time.perf_counter() - self._started) * 1000.0
            self._timers.close()


@dataclass(frozen=True)
class ServedCall:
    """What a route sends a client that did not ask to stream: the recorded call's response body."""

    call_id: int
    body: dict  # the response in the client's dialect, as JSON


@dataclass(frozen=True)
class StreamedAnswer:
    """What a route sends a streaming client: the call and its events in the client's dialect."""

    call: StreamedCall
    events: AsyncIterator[str]  # Server-Sent Events
