"""Anthropic Messages stream-through: the engine's chat chunks as Messages events, as they arrive.

Thinking and text stream delta by delta, each in its content block, a block ending when the other
kind starts. The finished Message is built by the dialect's own translation (``finalize``, the same
as for a non-streaming client) once the call is committed: the streamed blocks are closed (thinking
with its signature), the blocks that were not streamed (tool calls, whose input must parse as one
object) follow whole, then ``message_delta`` and ``message_stop``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

from gateway.anthropic.events import block_events, end_events
from gateway.anthropic.protocol import (
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    Message,
    MessageStartEvent,
    PingEvent,
    SignatureDelta,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    Usage,
)
from gateway.dialects import anthropic_error_body
from gateway.engine.token_prefix import token_count
from gateway.errors import GatewayError
from gateway.recording.streaming import CALL_ID_COMMENT, Committed, StreamedCall

Finalize = Callable[[dict], Message]  # chat.completion answer -> the Message


def _event(event) -> str:
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n"


class MessageStream:
    """The events of one streamed Message, built up chunk by chunk."""

    def __init__(self, model: str):
        self.model = model
        self.live: list[str] = []  # the types of the blocks streamed so far ("thinking" | "text")
        self.open = False  # whether the last of them is still open

    def start(self, chunk: dict) -> str:
        message = Message(
            id="msg_" + str(chunk.get("id", "")).removeprefix("chatcmpl-"),
            content=[],
            model=self.model,
            stop_reason=None,
            usage=Usage(input_tokens=token_count(chunk.get("prompt_token_ids")), output_tokens=0),
        )
        return _event(MessageStartEvent(message=message)) + _event(PingEvent())

    def add(self, chunk: dict) -> str:
        out: list[str] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if reasoning := delta.get("reasoning") or delta.get("reasoning_content"):
                out += self._open("thinking", ThinkingContent(thinking="", signature=""))
                out.append(self._delta(ThinkingDelta(thinking=reasoning)))
            if delta.get("content"):
                out += self._open("text", TextContent(text=""))
                out.append(self._delta(TextDelta(text=delta["content"])))
        return "".join(out)

    def finish(self, final: Message, call_id: int) -> str:
        out = self._close(final)
        rest = list(final.content)
        for kind in self.live:  # streamed already: not again
            match = next((block for block in rest if block.type == kind), None)
            if match is not None:
                rest.remove(match)
        for index, block in enumerate(rest, start=len(self.live)):
            out += block_events(index, block)
        return "".join([*out, CALL_ID_COMMENT.format(call_id), *end_events(final)])

    def _open(self, kind: str, block) -> list[str]:
        if self.open and self.live[-1] == kind:
            return []
        out = self._close(None)
        self.live.append(kind)
        self.open = True
        return [*out, _event(ContentBlockStartEvent(index=len(self.live) - 1, content_block=block))]

    def _delta(self, delta) -> str:
        return _event(ContentBlockDeltaEvent(index=len(self.live) - 1, delta=delta))

    def _close(self, final: Message | None) -> list[str]:
        if not self.open:
            return []
        self.open = False
        out = []
        if self.live[-1] == "thinking":
            signature = next((b.signature for b in final.content if b.type == "thinking"), "") if final else ""
            out.append(self._delta(SignatureDelta(signature=signature)))
        return [*out, _event(ContentBlockStopEvent(index=len(self.live) - 1))]


async def message_stream_events(
    call: StreamedCall,
    stream: MessageStream,
    finalize: Finalize,
) -> AsyncIterator[str]:
    started = False
    try:
        async for batch in call.chunks():
            if not started:
                started = True
                yield stream.start(batch[0] if isinstance(batch, list) and batch else {})
            if isinstance(batch, Committed):
                yield stream.finish(finalize(batch.answer), batch.call_id)
                return
            if events := "".join(stream.add(chunk) for chunk in batch):
                yield events  # what arrived together leaves together: one write
    except GatewayError as exc:  # the engine failed mid-answer: Anthropic's error event
        yield f"event: error\ndata: {json.dumps(anthropic_error_body(exc))}\n\n"
