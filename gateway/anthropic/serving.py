"""Serving the Anthropic Messages dialect: translate to Chat Completions, run the pipeline, translate back.

The translation is total and checked before the engine is called, so a request the gateway cannot
represent is a 400 naming the field and nothing is recorded for it. ``context_management`` edits are
applied to the history first (``gateway.anthropic.context``), as the API applies them; what was not
served (unknown fields, server tools, deferred tools) is recorded with the call
(``gateway.request.notes``).
"""

from __future__ import annotations

import json
from typing import TypeVar

from gateway.anthropic.context import apply_context_edits
from gateway.anthropic.protocol import (
    AssistantMessage,
    CountTokensRequest,
    DocumentBlock,
    ImageBlock,
    Message,
    MessagesRequest,
    PromptFields,
    SystemMessage,
    TextBlock,
    TextContent,
    ThinkingBlock,
    ThinkingContent,
    TokenCount,
    Tool,
    ToolChoice,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseContent,
    Usage,
)
from gateway.anthropic.stream import MessageStream, message_stream_events
from gateway.dialects import MESSAGES
from gateway.engine.token_prefix import token_count
from gateway.errors import InvalidRequest
from gateway.recording.pipeline import ChatPipeline
from gateway.recording.streaming import ServedCall, StreamedAnswer
from gateway.request.notes import RequestNotes, ignored_fields, recorded_request
from gateway.request.validation import parse_request
from store.records import RolloutIdentity

DIALECT = MESSAGES.name
RAW_ARGUMENTS_KEY = "_raw"  # tool input holding arguments the model wrote that are not a JSON object
RequestT = TypeVar("RequestT", bound=PromptFields)


class AnthropicServing:
    def __init__(self, pipeline: ChatPipeline):
        self.pipeline = pipeline

    async def messages(self, raw: dict, identity: RolloutIdentity) -> ServedCall | StreamedAnswer:
        request = parse_request(MessagesRequest, raw)
        undeclared = request.model_extra or ()
        request, notes = await self._prepared(request)
        body, recorded_raw = chat_body(request), recorded_request(raw, notes, undeclared)
        if request.stream:
            # Streamed through: thinking and text as sampled, the Message built as for JSON at the end.
            call = await self.pipeline.chat_stream(body, identity, DIALECT, recorded_raw)
            return StreamedAnswer(
                call,
                message_stream_events(call, MessageStream(request.model), lambda answer: to_message(answer, request)),
            )
        recorded = await self.pipeline.chat(body, identity, DIALECT, recorded_raw)
        return ServedCall(recorded.call_id, to_message(recorded.answer, request).model_dump(mode="json"))

    async def count_tokens(self, raw: dict) -> dict:
        """The prompt's length as the engine tokenizes it (nothing is generated or recorded)."""
        request, _ = await self._prepared(parse_request(CountTokensRequest, raw))
        return TokenCount(input_tokens=await self._count(request)).model_dump()

    async def _prepared(self, request: RequestT) -> tuple[RequestT, RequestNotes]:
        """The request with its context edits applied, and what of it the gateway does not serve."""
        notes = RequestNotes(ignored_fields=ignored_fields(request), left_out_tools=left_out_tools(request))
        request, cleared = await apply_context_edits(request, self._count)
        if cleared:
            notes.extra["context_edits"] = cleared
        return request, notes

    async def _count(self, request: PromptFields) -> int:
        engine_model = self.pipeline.policies.base_model  # every adapter shares the base model's tokenizer
        return (await self.pipeline.engine.tokenize({"model": engine_model, **prompt_fields(request)}))["count"]


# --- request: Messages -> Chat Completions -------------------------------------------------


def chat_body(request: MessagesRequest) -> dict:
    body = {"model": request.model, "max_tokens": request.max_tokens, **prompt_fields(request)}
    if request.tool_choice is not None:
        body.update(chat_tool_choice(request.tool_choice))
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    if request.output_config is not None and request.output_config.format is not None:
        body["response_format"] = _response_format(request.output_config.format)
    for name in ("temperature", "top_p", "top_k"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    return body


def _response_format(form: dict) -> dict:
    """``output_config.format`` (structured outputs) as Chat Completions' ``response_format``."""
    if form.get("type") != "json_schema" or not isinstance(form.get("schema"), dict):
        raise InvalidRequest(
            'output_config.format: only {"type": "json_schema", "schema": {...}} is supported',
            param="output_config.format",
        )
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": form["schema"]}}


def prompt_fields(request: PromptFields) -> dict:
    """The fields that decide the prompt's tokens, as vLLM's chat and /tokenize both take them."""
    messages = chat_messages(request)
    fields: dict = {"messages": messages}
    if isinstance(request.messages[-1], AssistantMessage):
        # A final assistant turn is a prefill: the model continues it rather than starting anew.
        fields.update(add_generation_prompt=False, continue_final_message=True)
    else:
        fields["add_generation_prompt"] = True
    if tools := offered_tools(request):
        fields["tools"] = [chat_tool(tool) for tool in tools]
    template_kwargs = {}
    if request.thinking is not None:
        # The switch reasoning templates (Qwen3 and the like) read; others ignore it.
        template_kwargs["enable_thinking"] = request.thinking.type != "disabled"
    if request.output_config is not None and request.output_config.effort is not None:
        template_kwargs["reasoning_effort"] = request.output_config.effort  # gpt-oss-style templates read it
    if template_kwargs:
        fields["chat_template_kwargs"] = template_kwargs
    return fields


def offered_tools(request: PromptFields) -> list[Tool]:
    """The tools the model sees: client tools, deferred ones only once a tool_reference loaded them."""
    loaded = _referenced_tools(request)
    return [
        tool
        for tool in request.tools or ()
        if isinstance(tool, Tool) and (not tool.defer_loading or tool.name in loaded)
    ]


def left_out_tools(request: PromptFields) -> list[str]:
    offered = {id(tool) for tool in offered_tools(request)}
    return [tool.name for tool in request.tools or () if id(tool) not in offered]


def _referenced_tools(request: PromptFields) -> set[str]:
    names: set[str] = set()
    for message in request.messages:
        if isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                    names.update(p.tool_name for p in block.content if isinstance(p, ToolReferenceBlock))
    return names


def chat_tool(tool: Tool) -> dict:
    function = {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": tool.strict,
    }
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def chat_tool_choice(choice: ToolChoice) -> dict:
    fields: dict = {
        "tool_choice": {"auto": "auto", "any": "required", "none": "none"}.get(choice.type)
        or {"type": "function", "function": {"name": choice.name}}
    }
    if choice.disable_parallel_tool_use:
        fields["parallel_tool_calls"] = False
    return fields


def chat_messages(request: PromptFields) -> list[dict]:
    messages = [] if not request.system else [{"role": "system", "content": _system_text(request.system)}]
    called: set[str] = set()  # tool_use ids seen so far: a result must answer an earlier call
    for index, message in enumerate(request.messages):
        if isinstance(message, AssistantMessage):
            messages.append(_assistant(message))
            called.update(b.id for b in message.content if isinstance(b, ToolUseBlock))
        elif isinstance(message, SystemMessage):
            messages.append({"role": "system", "content": _system_text(message.content)})
        else:
            messages += _user(message.content, called, f"messages.{index}.content")
    return messages


def _system_text(system: str | list[TextBlock]) -> str:
    return system if isinstance(system, str) else _join(block.text for block in system)


def _join(texts) -> str:
    # "\n" between text blocks, as the bundled chat template joins text parts.
    return "\n".join(texts)


def _user(content, called: set[str], where: str) -> list[dict]:
    """One user turn becomes user messages and, for each tool_result, a tool message, in order."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    messages, parts = [], []
    for index, block in enumerate(content):
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in called:
                raise InvalidRequest(
                    f"{where}.{index}.tool_use_id: tool result without a call: no earlier "
                    f"tool_use has id {block.tool_use_id!r}",
                    param=f"{where}.{index}.tool_use_id",
                )
            messages += _user_message(parts)
            parts = []
            messages.append(_tool_message(block))
        else:
            parts.append(_user_part(block, f"{where}.{index}"))
    return messages + _user_message(parts)


def _user_message(parts: list[dict]) -> list[dict]:
    if not parts:
        return []
    if all(part["type"] == "text" for part in parts):
        return [{"role": "user", "content": _join(part["text"] for part in parts)}]
    return [{"role": "user", "content": parts}]


def _tool_message(block: ToolResultBlock) -> dict:
    # is_error has no slot in a chat template; an error result's text says what went wrong.
    content = block.content
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        text = _join(part.text if isinstance(part, TextBlock) else f"Tool loaded: {part.tool_name}" for part in content)
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}


def _user_part(block: TextBlock | ImageBlock | DocumentBlock, where: str) -> dict:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        return {"type": "image_url", "image_url": {"url": _image_url(block.source, where)}}
    return {"type": "text", "text": _document_text(block.source, where)}


def _image_url(source: dict, where: str) -> str:
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return source["url"]
    raise InvalidRequest(
        f"{where}.source: an image source is base64 (media_type, data) or url", param=f"{where}.source"
    )


def _document_text(source: dict, where: str) -> str:
    """Documents reach the engine as text; binary ones (PDF) cannot be read by a text model."""
    kind, data, content = source.get("type"), source.get("data"), source.get("content")
    if kind == "text" and isinstance(data, str):
        return data
    if kind == "content" and isinstance(content, str):
        return content
    if (
        kind == "content"
        and isinstance(content, list)
        and all(isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in content)
    ):
        return _join(b["text"] for b in content)
    raise InvalidRequest(
        f"{where}.source: only text documents are supported (type text, or content of text blocks)",
        param=f"{where}.source",
    )


def _assistant(message: AssistantMessage) -> dict:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts = [b.text for b in message.content if isinstance(b, TextBlock)]
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": _arguments(b.input)}}
        for b in message.content
        if isinstance(b, ToolUseBlock)
    ]
    reasoning = [b.thinking for b in message.content if isinstance(b, ThinkingBlock)]
    # redacted_thinking carries only opaque data: nothing of it can be rendered.
    chat: dict = {"role": "assistant", "content": _join(texts) if texts or not calls else None}
    if calls:
        chat["tool_calls"] = calls
    if reasoning:
        chat["reasoning_content"] = _join(reasoning)
    return chat


def _arguments(tool_input: dict) -> str:
    if set(tool_input) == {RAW_ARGUMENTS_KEY} and isinstance(tool_input[RAW_ARGUMENTS_KEY], str):
        return tool_input[RAW_ARGUMENTS_KEY]  # our own fallback coming back: the model's exact text
    return json.dumps(tool_input)


# --- answer: chat.completion -> Message ----------------------------------------------------


def to_message(answer: dict, request: MessagesRequest) -> Message:
    choice = answer["choices"][0]
    message = choice.get("message") or {}
    content: list = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        content.append(ThinkingContent(thinking=reasoning))
    if message.get("content"):
        content.append(TextContent(text=message["content"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            ToolUseContent(id=call["id"], name=function.get("name", ""), input=_tool_input(function.get("arguments")))
        )
    stop_reason, stop_sequence = _stop(choice, request, any(isinstance(b, ToolUseContent) for b in content))
    return Message(
        id=_message_id(answer),
        content=content,
        model=request.model,
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        usage=_usage(answer, choice),
    )


def _tool_input(arguments: str | None) -> dict:
    """The call's arguments as an object; text that is not a JSON object is kept, not dropped."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: arguments}


def _stop(choice: dict, request: MessagesRequest, called_tools: bool) -> tuple[str, str | None]:
    if choice.get("finish_reason") == "length":
        return "max_tokens", None
    if called_tools:
        return "tool_use", None
    matched = choice.get("stop_reason")  # vLLM: the stop string that ended generation, if any
    if isinstance(matched, str) and matched in (request.stop_sequences or ()):
        return "stop_sequence", matched
    return "end_turn", None


def _usage(answer: dict, choice: dict) -> Usage:
    usage = answer.get("usage") or {}
    return Usage(
        input_tokens=usage.get("prompt_tokens", token_count(answer.get("prompt_token_ids"))),
        output_tokens=usage.get("completion_tokens", len(choice.get("token_ids") or ())),
    )


def _message_id(answer: dict) -> str:
    return "msg_" + str(answer.get("id", "")).removeprefix("chatcmpl-")
