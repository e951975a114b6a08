"""Serving the Responses dialect: input items become chat messages, the answer becomes a Response.

The engine only speaks Chat Completions, so a Responses request is translated into the chat body an
agent would have sent for the same conversation and goes through the shared pipeline; the recorded
tokens are exactly those of that chat call. Tools map as ``gateway.responses.tools`` says; what was not
served (unknown fields, hosted tools) is recorded with the call (``gateway.request.notes``).
"""

from __future__ import annotations

import time
import uuid

from gateway.dialects import RESPONSES
from gateway.errors import InvalidRequest
from gateway.recording.pipeline import ChatPipeline
from gateway.recording.streaming import ServedCall, StreamedAnswer
from gateway.request.notes import RequestNotes, ignored_fields, recorded_request
from gateway.request.validation import parse_request
from gateway.responses import reasoning as encrypted
from gateway.responses.protocol import (
    ContentPart,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    IncompleteDetails,
    InputImage,
    MessageItem,
    OutputCustomToolCall,
    OutputFunctionCall,
    OutputMessage,
    OutputReasoning,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Response,
    ResponsesRequest,
    ResponseUsage,
    ToolChoiceFunction,
)
from gateway.responses.stream import ResponseStream, response_stream_events
from gateway.responses.tools import ToolIndex, custom_arguments, custom_input, index_tools
from store.records import RolloutIdentity

EMPTY_ANSWER = {"choices": [{"message": {}, "finish_reason": None}]}  # a Response's settings, no output yet
# Sampling extensions vLLM understands on chat requests; sent on when a client adds them.
SAMPLING_EXTENSIONS = ("seed", "stop", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


class ResponsesServing:
    def __init__(self, pipeline: ChatPipeline):
        self.pipeline = pipeline

    async def create(self, raw: dict, identity: RolloutIdentity) -> ServedCall | StreamedAnswer:
        request = parse_request(ResponsesRequest, raw)
        if request.previous_response_id is not None:
            # Nothing is stored between calls: the conversation must come whole, every time.
            raise InvalidRequest(
                "previous_response_id is not supported; send the full input", param="previous_response_id"
            )
        tools = index_tools(request.tools)
        notes = RequestNotes(ignored_fields=ignored_fields(request), left_out_tools=tools.left_out)
        body, recorded_raw = chat_body(request, raw, tools), recorded_request(raw, notes, request.model_extra or ())
        if request.stream:
            return await self._stream(body, identity, recorded_raw, request, tools)
        recorded = await self.pipeline.chat(body, identity, RESPONSES.name, recorded_raw)
        response = to_response(recorded.answer, request, tools, recorded.call_id)
        return ServedCall(recorded.call_id, response.model_dump(mode="json"))

    async def _stream(
        self, body: dict, identity: RolloutIdentity, recorded_raw: dict, request: ResponsesRequest, tools: ToolIndex
    ) -> StreamedAnswer:
        """Streamed through: text and reasoning as sampled, the Response built as for JSON at the end."""
        call = await self.pipeline.chat_stream(body, identity, RESPONSES.name, recorded_raw)
        skeleton = to_response(EMPTY_ANSWER, request, tools)
        stream = ResponseStream(skeleton, new_id, tools)
        return StreamedAnswer(
            call,
            response_stream_events(call, stream, lambda answer, call_id: to_response(answer, request, tools, call_id)),
        )


# --- request: Responses -> Chat Completions --------------------------------------------------


def chat_body(request: ResponsesRequest, raw: dict, tools: ToolIndex | None = None) -> dict:
    tools = tools or index_tools(request.tools)
    body: dict = {"model": request.model, "messages": chat_messages(request, tools)}
    if tools.chat_tools:
        body["tools"] = tools.chat_tools
    if request.tool_choice is not None:
        body["tool_choice"] = _chat_tool_choice(request.tool_choice, tools)
    if request.reasoning is not None and request.reasoning.effort is not None:
        # Templates with an effort switch (gpt-oss-style) read it; others ignore it.
        body["chat_template_kwargs"] = {"reasoning_effort": request.reasoning.effort}
    for name, value in (
        ("max_tokens", request.max_output_tokens),
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("parallel_tool_calls", request.parallel_tool_calls),
        ("user", request.user),
        ("response_format", _response_format(request.text)),
    ):
        if value is not None:
            body[name] = value
    body.update({name: raw[name] for name in SAMPLING_EXTENSIONS if name in raw})
    return body


def chat_messages(request: ResponsesRequest, tools: ToolIndex | None = None) -> list[dict]:
    """The input items as chat messages, the way a Chat Completions client would send them.

    Consecutive function_call items are one assistant turn (joined to an assistant message right
    before them); reasoning goes on the assistant message that follows it and is dropped when
    another kind of message comes first (the engine only renders reasoning on assistant turns).
    """
    tools = tools or index_tools(request.tools)
    messages: list[dict] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    first = len(messages)
    turn: dict | None = None  # the assistant message that function calls attach to
    reasoning: list[str] = []
    call_ids: set[str] = set()
    for index, item in enumerate(request.input):
        if isinstance(item, ReasoningItem):
            if text := _reasoning_text(item):
                reasoning.append(text)
            turn = None
            continue
        if isinstance(item, (FunctionCallItem, CustomToolCallItem)):
            if turn is None:
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            turn.setdefault("tool_calls", []).append(_chat_call(item, tools))
            call_ids.add(item.call_id)
        else:
            message = _message(item, index) if isinstance(item, MessageItem) else _tool_message(item, index, call_ids)
            messages.append(message)
            turn = message if message["role"] == "assistant" else None
        if reasoning and turn is not None:
            turn["reasoning_content"] = "\n".join(reasoning)
        reasoning = []
    if len(messages) == first:
        raise InvalidRequest("input has no message or function_call items", param="input")
    return messages


def _chat_call(item: FunctionCallItem | CustomToolCallItem, tools: ToolIndex) -> dict:
    if isinstance(item, CustomToolCallItem):
        name, arguments = tools.offered_name(item.name), custom_arguments(item.input)
    else:
        name, arguments = tools.offered_name(item.name, item.namespace), item.arguments
    return {"id": item.call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _message(item: MessageItem, index: int) -> dict:
    return {"role": item.role, "content": _chat_content(item.content, index)}


def _tool_message(item: FunctionCallOutputItem | CustomToolCallOutputItem, index: int, call_ids: set[str]) -> dict:
    if item.call_id not in call_ids:
        raise InvalidRequest(
            f"input.{index}: tool result without a call: no earlier function_call has call_id {item.call_id!r}",
            param=f"input.{index}.call_id",
        )
    content = item.output if isinstance(item.output, str) else [_text_part(p.text) for p in item.output]
    return {"role": "tool", "tool_call_id": item.call_id, "content": content}


def _reasoning_text(item: ReasoningItem) -> str:
    # The raw reasoning when the client kept it (our own outputs carry it), else the text our opaque
    # value carries, else its summary.
    if item.content:
        return "\n".join(part.text for part in item.content)
    if (ref := encrypted.decode(item.encrypted_content)) is not None:
        return ref.text
    return "\n".join(part.text for part in item.summary)


def _chat_content(content: str | list[ContentPart], index: int) -> str | list[dict]:
    if isinstance(content, str):
        return content
    return [_chat_part(part, f"input.{index}.content.{n}") for n, part in enumerate(content)]


def _chat_part(part: ContentPart, where: str) -> dict:
    if isinstance(part, InputImage):
        if not part.image_url:
            raise InvalidRequest(f"{where}: input_image needs an image_url (the gateway keeps no files)", param=where)
        image = {"url": part.image_url, **({"detail": part.detail} if part.detail else {})}
        return {"type": "image_url", "image_url": image}
    return _text_part(part.text)  # input_text and output_text alike


def _text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def _chat_tool_choice(choice: str | ToolChoiceFunction, tools: ToolIndex) -> str | dict:
    if isinstance(choice, ToolChoiceFunction):
        return {"type": "function", "function": {"name": tools.offered_name(choice.name)}}
    return choice


def _response_format(text: dict | None) -> dict | None:
    """``text.format`` as Chat Completions' ``response_format`` (None for plain text)."""
    form = (text or {}).get("format") or {"type": "text"}
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {key: form[key] for key in ("name", "schema", "description", "strict") if key in form}
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidRequest(
        f"text.format: unsupported format {kind!r}; use text, json_object or json_schema", param="text.format"
    )


# --- answer: chat.completion -> Response -----------------------------------------------------


def output_call(call: dict, tools: ToolIndex) -> OutputFunctionCall | OutputCustomToolCall:
    """The model's tool call as the client's tool expects it (custom tools get their string input)."""
    name, arguments = call["function"]["name"], call["function"]["arguments"]
    origin = tools.origins.get(name)
    if origin is not None and origin.kind == "custom":
        return OutputCustomToolCall(
            id=new_id("ctc"), call_id=call["id"], name=origin.name, input=custom_input(arguments)
        )
    if origin is not None:
        return OutputFunctionCall(
            id=new_id("fc"), call_id=call["id"], name=origin.name, arguments=arguments, namespace=origin.namespace
        )
    return OutputFunctionCall(id=new_id("fc"), call_id=call["id"], name=name, arguments=arguments)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def to_response(
    answer: dict, request: ResponsesRequest, tools: ToolIndex | None = None, call_id: int | None = None
) -> Response:
    tools = tools or index_tools(request.tools)
    choice = answer["choices"][0]
    message = choice.get("message") or {}
    truncated = choice.get("finish_reason") == "length"
    output: list = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        opaque = (
            encrypted.encode(call_id, reasoning)
            if call_id is not None and encrypted.INCLUDE in (request.include or ())
            else None
        )
        output.append(
            OutputReasoning(
                id=new_id("rs"),
                content=[ReasoningText(type="reasoning_text", text=reasoning)],
                encrypted_content=opaque,
            )
        )
    if message.get("content"):
        output.append(
            OutputMessage(
                id=new_id("msg"),
                status="incomplete" if truncated else "completed",
                content=[OutputText(type="output_text", text=message["content"])],
            )
        )
    output += [output_call(call, tools) for call in message.get("tool_calls") or []]
    usage = answer.get("usage") or {}
    return Response(
        id=new_id("resp"),
        created_at=int(answer.get("created") or time.time()),
        status="incomplete" if truncated else "completed",
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if truncated else None,
        model=request.model,
        output=output,
        usage=ResponseUsage(
            input_tokens=usage.get("prompt_tokens", 0),
            output_tokens=usage.get("completion_tokens", 0),
            total_tokens=usage.get("total_tokens", 0),
        ),
        instructions=request.instructions,
        tools=[t.model_dump(exclude_none=True) for t in request.tools or []],
        tool_choice=request.tool_choice or "auto",
        parallel_tool_calls=True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        max_output_tokens=request.max_output_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        reasoning=request.reasoning,
        text=request.text or {"format": {"type": "text"}},
        truncation=request.truncation or "disabled",
        metadata=request.metadata or {},
        user=request.user,
    )
