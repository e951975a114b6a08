"""Responses Server-Sent Events: their wire models (the spec's stream events), and the events for what
the stream-through (``gateway.responses.stream``) sends whole: an output item once it is complete
(added, its text or arguments in one delta, done), the events numbered in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from pydantic import Field

from gateway.responses.protocol import (
    OutputFunctionCall,
    OutputItem,
    OutputMessage,
    OutputReasoning,
    OutputText,
    Response,
    ResponsesModel,
)

# --- stream events ---------------------------------------------------------------------------
# Each SSE event is "event: <type>\ndata: <json>\n\n"; every payload carries its ``type`` and an
# increasing ``sequence_number``.


class StreamEvent(ResponsesModel):
    type: str
    sequence_number: int


class ResponseLifecycleEvent(StreamEvent):
    # response.created | response.in_progress | response.completed
    response: Response


class OutputItemEvent(StreamEvent):
    # response.output_item.added | response.output_item.done
    output_index: int
    item: OutputItem


class ContentPartEvent(StreamEvent):
    # response.content_part.added | response.content_part.done
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class OutputTextDeltaEvent(StreamEvent):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = Field(default_factory=list)


class OutputTextDoneEvent(StreamEvent):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningTextDeltaEvent(StreamEvent):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDoneEvent(StreamEvent):
    item_id: str
    output_index: int
    content_index: int
    text: str


class FunctionCallArgumentsDeltaEvent(StreamEvent):
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDoneEvent(StreamEvent):
    item_id: str
    output_index: int
    arguments: str


class CustomToolCallInputDeltaEvent(StreamEvent):
    # response.custom_tool_call_input.delta
    item_id: str
    output_index: int
    delta: str


class CustomToolCallInputDoneEvent(StreamEvent):
    # response.custom_tool_call_input.done
    item_id: str
    output_index: int
    input: str


class Events:
    """Serializes events in order, numbering them."""

    def __init__(self):
        self._sequence = itertools.count()

    def __call__(self, model: type[StreamEvent], type: str, **fields) -> str:
        event = model(type=type, sequence_number=next(self._sequence), **fields)
        return f"event: {type}\ndata: {event.model_dump_json()}\n\n"


def item_events(event: Events, index: int, item) -> Iterator[str]:
    """One finished output item, whole: added, its text or arguments in one delta, done."""
    if isinstance(item, OutputMessage):
        yield from _message_events(event, index, item)
    elif isinstance(item, OutputFunctionCall):
        yield from _function_call_events(event, index, item)
    elif isinstance(item, OutputReasoning):
        yield from _reasoning_events(event, index, item)
    else:  # any other item: announced and done whole
        yield event(OutputItemEvent, "response.output_item.added", output_index=index, item=item)
        yield event(OutputItemEvent, "response.output_item.done", output_index=index, item=item)


def _message_events(event: Events, index: int, item: OutputMessage) -> Iterator[str]:
    where = {"item_id": item.id, "output_index": index}
    yield event(
        OutputItemEvent,
        "response.output_item.added",
        output_index=index,
        item=item.model_copy(update={"status": "in_progress", "content": []}),
    )
    for part_index, part in enumerate(item.content):
        at = {**where, "content_index": part_index}
        yield event(ContentPartEvent, "response.content_part.added", **at, part=part.model_copy(update={"text": ""}))
        yield event(OutputTextDeltaEvent, "response.output_text.delta", **at, delta=part.text)
        yield event(OutputTextDoneEvent, "response.output_text.done", **at, text=part.text)
        yield event(ContentPartEvent, "response.content_part.done", **at, part=part)
    yield event(OutputItemEvent, "response.output_item.done", output_index=index, item=item)


def _function_call_events(event: Events, index: int, item: OutputFunctionCall) -> Iterator[str]:
    where = {"item_id": item.id, "output_index": index}
    yield event(
        OutputItemEvent,
        "response.output_item.added",
        output_index=index,
        item=item.model_copy(update={"status": "in_progress", "arguments": ""}),
    )
    yield event(
        FunctionCallArgumentsDeltaEvent, "response.function_call_arguments.delta", **where, delta=item.arguments
    )
    yield event(
        FunctionCallArgumentsDoneEvent, "response.function_call_arguments.done", **where, arguments=item.arguments
    )
    yield event(OutputItemEvent, "response.output_item.done", output_index=index, item=item)


def _reasoning_events(event: Events, index: int, item: OutputReasoning) -> Iterator[str]:
    yield event(
        OutputItemEvent, "response.output_item.added", output_index=index, item=item.model_copy(update={"content": []})
    )
    for part_index, part in enumerate(item.content or []):
        at = {"item_id": item.id, "output_index": index, "content_index": part_index}
        yield event(ReasoningTextDeltaEvent, "response.reasoning_text.delta", **at, delta=part.text)
        yield event(ReasoningTextDoneEvent, "response.reasoning_text.done", **at, text=part.text)
    yield event(OutputItemEvent, "response.output_item.done", output_index=index, item=item)
