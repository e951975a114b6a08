"""Responses stream-through: the engine's chat chunks as Responses events, as they arrive.

Reasoning and text stream delta by delta, each in an output item opened by its first delta and
closed when the other kind starts; tool calls stream as items of their own, a function call's
arguments as they come and a custom (freeform) tool call's input, decoded from its arguments
(``response.custom_tool_call_input.delta``), as Codex's apply_patch shows it being written. The
finished Response is built by the dialect's own translation (``finalize``, the same as for a
non-streaming client) once the call is committed: the streamed items are closed with their final
form (under the ids they were announced with), any item that was not streamed follows whole, then
``response.completed``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from gateway.errors import GatewayError
from gateway.recording.streaming import CALL_ID_COMMENT, Committed, StreamedCall
from gateway.responses.events import (
    ContentPartEvent,
    CustomToolCallInputDeltaEvent,
    CustomToolCallInputDoneEvent,
    Events,
    FunctionCallArgumentsDeltaEvent,
    FunctionCallArgumentsDoneEvent,
    OutputItemEvent,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    ReasoningTextDeltaEvent,
    ReasoningTextDoneEvent,
    ResponseLifecycleEvent,
    StreamEvent,
    item_events,
)
from gateway.responses.protocol import (
    OutputCustomToolCall,
    OutputFunctionCall,
    OutputMessage,
    OutputReasoning,
    OutputText,
    ReasoningText,
    Response,
)
from gateway.responses.tools import CustomInputStream, ToolIndex

Finalize = Callable[[dict, int], Response]  # (chat.completion answer, call id) -> the Response


class ErrorEvent(StreamEvent):
    code: str
    message: str
    param: str | None = None


@dataclass
class _Live:
    type: str  # "reasoning" | "message" | "custom_tool_call"
    id: str
    text: list[str] = field(default_factory=list)
    call: tuple[str, str] | None = None  # a tool call's (call_id, name)
    namespace: str | None = None  # a function call's
    input: CustomInputStream | None = None  # a custom tool call's input, decoded as it arrives

    def model(self, status: str = "completed"):
        text = "".join(self.text)  # a function call's: its arguments
        if self.type == "custom_tool_call":
            call_id, name = self.call
            return OutputCustomToolCall(id=self.id, call_id=call_id, name=name, input=self.input.sent, status=status)
        if self.type == "function_call":
            call_id, name = self.call
            return OutputFunctionCall(
                id=self.id, call_id=call_id, name=name, arguments=text, namespace=self.namespace, status=status
            )
        if self.type == "message":
            return OutputMessage(id=self.id, status=status, content=[OutputText(type="output_text", text=text)])
        return OutputReasoning(id=self.id, content=[ReasoningText(type="reasoning_text", text=text)])


class ResponseStream:
    """The events of one streamed Response, built up chunk by chunk."""

    def __init__(self, skeleton: Response, new_id: Callable[[str], str], tools: ToolIndex | None = None):
        self.skeleton, self.new_id, self.event = skeleton, new_id, Events()
        self.tools = tools or ToolIndex()
        self.live: list[_Live] = []
        self.open: _Live | None = None
        self.calls: dict[int, _Live] = {}  # tool calls, by the chat deltas' index

    def start(self) -> str:
        started = self.skeleton.model_copy(
            update={"status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
        )
        return self.event(ResponseLifecycleEvent, "response.created", response=started) + self.event(
            ResponseLifecycleEvent, "response.in_progress", response=started
        )

    def add(self, chunk: dict) -> str:
        out: list[str] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if reasoning := delta.get("reasoning") or delta.get("reasoning_content"):
                out += self._delta("reasoning", reasoning, ReasoningTextDeltaEvent, "response.reasoning_text.delta")
            if delta.get("content"):
                out += self._delta("message", delta["content"], OutputTextDeltaEvent, "response.output_text.delta")
            for call in delta.get("tool_calls") or ():
                out += self._tool_call(call)
        return "".join(out)

    def _tool_call(self, delta: dict) -> list[str]:
        """A tool call as it is sampled: a function call's arguments, a custom tool call's input."""
        index, function = delta.get("index", 0), delta.get("function") or {}
        out: list[str] = []
        if index not in self.calls:
            self.open = None  # text after the call is a message of its own
            live = self._call_item(delta.get("id") or "", function.get("name") or "")
            self.calls[index] = live
            self.live.append(live)
            out.append(
                self.event(
                    OutputItemEvent,
                    "response.output_item.added",
                    output_index=len(self.live) - 1,
                    item=live.model("in_progress"),
                )
            )
        live, piece = self.calls[index], function.get("arguments") or ""
        if live.input is not None and (text := live.input.feed(piece)):
            out.append(
                self.event(
                    CustomToolCallInputDeltaEvent,
                    "response.custom_tool_call_input.delta",
                    **self._where(live),
                    delta=text,
                )
            )
        elif live.input is None and piece:
            live.text.append(piece)
            out.append(
                self.event(
                    FunctionCallArgumentsDeltaEvent,
                    "response.function_call_arguments.delta",
                    **self._where(live),
                    delta=piece,
                )
            )
        return out

    def _call_item(self, call_id: str, offered: str) -> _Live:
        origin = self.tools.origins.get(offered)
        if origin is not None and origin.kind == "custom":
            return _Live("custom_tool_call", self.new_id("ctc"), call=(call_id, origin.name), input=CustomInputStream())
        name, namespace = (origin.name, origin.namespace) if origin is not None else (offered, None)
        return _Live("function_call", self.new_id("fc"), call=(call_id, name), namespace=namespace)

    def finish(self, final: Response, call_id: int) -> str:
        """Close the streamed items with their final form, send the rest whole, then completed."""
        self.open = None
        rest, output, out = list(final.output), [], []
        for index, live in enumerate(self.live):
            match = next((item for item in rest if item.type == live.type), None)
            if match is not None:
                rest.remove(match)
            item = live.model() if match is None else match.model_copy(update={"id": live.id})
            output.append(item)
            out += self._done(index, live, item)
        for item in rest:
            out += item_events(self.event, len(output), item)
            output.append(item)
        out.append(CALL_ID_COMMENT.format(call_id))
        # Always response.completed, also for an answer cut at max_output_tokens (its status says
        # "incomplete"): Codex CLI and the SDK's stream helper fail a stream without it.
        out.append(
            self.event(
                ResponseLifecycleEvent,
                "response.completed",
                response=final.model_copy(update={"id": self.skeleton.id, "output": output}),
            )
        )
        return "".join(out)

    def error(self, exc: GatewayError) -> str:
        return self.event(ErrorEvent, "error", code=exc.code or "server_error", message=exc.message)

    def _delta(self, kind: str, text: str, model: type[StreamEvent], type: str) -> list[str]:
        out = [] if self.open is not None and self.open.type == kind else self._open(kind)
        self.open.text.append(text)
        out.append(self.event(model, type, **self._where(self.open), content_index=0, delta=text))
        return out

    def _open(self, kind: str) -> list[str]:
        live = _Live(kind, self.new_id("msg" if kind == "message" else "rs"))
        self.live.append(live)
        self.open = live
        announced = live.model("in_progress") if kind == "message" else live.model()
        out = [
            self.event(
                OutputItemEvent,
                "response.output_item.added",
                output_index=len(self.live) - 1,
                item=announced.model_copy(update={"content": []}),
            )
        ]
        if kind == "message":
            out.append(
                self.event(
                    ContentPartEvent,
                    "response.content_part.added",
                    **self._where(live),
                    content_index=0,
                    part=OutputText(type="output_text", text=""),
                )
            )
        return out

    def _done(self, index: int, live: _Live, item) -> list[str]:
        at = {"item_id": live.id, "output_index": index, "content_index": 0}
        out = []
        if isinstance(item, OutputMessage):
            part = item.content[0] if item.content else OutputText(type="output_text", text="")
            out += [
                self.event(OutputTextDoneEvent, "response.output_text.done", **at, text=part.text),
                self.event(ContentPartEvent, "response.content_part.done", **at, part=part),
            ]
        elif isinstance(item, OutputReasoning):
            text = "".join(part.text for part in item.content or ())
            out.append(self.event(ReasoningTextDoneEvent, "response.reasoning_text.done", **at, text=text))
        elif isinstance(item, OutputFunctionCall):
            where, sent = {"item_id": live.id, "output_index": index}, "".join(live.text)
            if item.arguments.startswith(sent) and item.arguments != sent:
                out.append(
                    self.event(
                        FunctionCallArgumentsDeltaEvent,
                        "response.function_call_arguments.delta",
                        **where,
                        delta=item.arguments[len(sent) :],
                    )
                )
            out.append(
                self.event(
                    FunctionCallArgumentsDoneEvent,
                    "response.function_call_arguments.done",
                    **where,
                    arguments=item.arguments,
                )
            )
        elif isinstance(item, OutputCustomToolCall):
            where = {"item_id": live.id, "output_index": index}
            sent = live.input.sent
            if item.input.startswith(sent) and item.input != sent:  # what was not streamed, if any
                out.append(
                    self.event(
                        CustomToolCallInputDeltaEvent,
                        "response.custom_tool_call_input.delta",
                        **where,
                        delta=item.input[len(sent) :],
                    )
                )
            out.append(
                self.event(
                    CustomToolCallInputDoneEvent, "response.custom_tool_call_input.done", **where, input=item.input
                )
            )
        out.append(self.event(OutputItemEvent, "response.output_item.done", output_index=index, item=item))
        return out

    def _where(self, live: _Live) -> dict:
        return {"item_id": live.id, "output_index": self.live.index(live)}


async def response_stream_events(
    call: StreamedCall,
    stream: ResponseStream,
    finalize: Finalize,
) -> AsyncIterator[str]:
    yield stream.start()
    try:
        async for batch in call.chunks():
            if isinstance(batch, Committed):
                yield stream.finish(finalize(batch.answer, batch.call_id), batch.call_id)
                return
            if events := "".join(stream.add(chunk) for chunk in batch):
                yield events  # what arrived together leaves together: one write
    except GatewayError as exc:  # the engine failed mid-answer: the client's SDK raises this
        yield stream.error(exc)
