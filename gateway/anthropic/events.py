"""Anthropic's Server-Sent Events for what the stream-through (``gateway.anthropic.stream``) sends
whole: a content block once it is complete (the text, the thinking then its signature, a tool call's
whole input as one ``partial_json``) and the message's end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from gateway.anthropic.protocol import (
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    DeltaUsage,
    InputJsonDelta,
    Message,
    MessageDelta,
    MessageDeltaEvent,
    MessageStopEvent,
    SignatureDelta,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolUseContent,
)


def _event(event) -> str:
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n"


def block_events(index: int, block) -> Iterator[str]:
    """One finished content block, whole: start, its content in one delta, stop."""
    yield _event(ContentBlockStartEvent(index=index, content_block=_opening(block)))
    for delta in _deltas(block):
        yield _event(ContentBlockDeltaEvent(index=index, delta=delta))
    yield _event(ContentBlockStopEvent(index=index))


def end_events(message: Message) -> Iterator[str]:
    """The stream's last events: the stop reason and output tokens, then message_stop."""
    yield _event(
        MessageDeltaEvent(
            delta=MessageDelta(stop_reason=message.stop_reason, stop_sequence=message.stop_sequence),
            usage=DeltaUsage(output_tokens=message.usage.output_tokens),
        )
    )
    yield _event(MessageStopEvent())


def _opening(block):
    """The block as content_block_start announces it: empty, filled by the deltas."""
    if isinstance(block, TextContent):
        return TextContent(text="")
    if isinstance(block, ThinkingContent):
        return ThinkingContent(thinking="", signature="")
    return ToolUseContent(id=block.id, name=block.name, input={})


def _deltas(block) -> list:
    if isinstance(block, TextContent):
        return [TextDelta(text=block.text)]
    if isinstance(block, ThinkingContent):
        return [ThinkingDelta(thinking=block.thinking), SignatureDelta(signature=block.signature)]
    return [InputJsonDelta(partial_json=json.dumps(block.input))]
