"""Anthropic Messages wire models (requests, the Message answer, stream events), mirroring the spec.

The request side follows the current API as Claude Code uses it: ``system``-role messages anywhere in
``messages``, ``thinking`` (enabled / adaptive / disabled), ``output_config`` (effort, format),
``context_management`` edits, ``metadata``, ``cache_control`` on blocks and tools, deferred tools
(``defer_loading``) and ``tool_reference`` blocks, server tools (``web_search_20250305``...).

Requests allow extra fields: clients send fields for features the gateway does not serve
(``container``, ``mcp_servers``, a newer release's additions...); they are accepted and stored with the
call (named under ``_gateway.ignored_fields``), but only the fields below shape the engine call.
Field types and values of the fields below are still checked, so a malformed value is a 400 in
Anthropic's shape before anything reaches the engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from gateway.request.notes import LeftOut


class AnthropicModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class CacheControl(AnthropicModel):
    """Prompt caching breakpoint: accepted and recorded; vLLM's prefix cache needs no hints."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class Cacheable(AnthropicModel):
    cache_control: CacheControl | None = None


# --- content blocks (request) --------------------------------------------------------------


class TextBlock(Cacheable):
    type: Literal["text"]
    text: str


class ImageBlock(Cacheable):
    type: Literal["image"]
    source: dict[str, Any]  # {"type": "base64", "media_type", "data"} or {"type": "url", "url"}


class DocumentBlock(Cacheable):
    type: Literal["document"]
    source: dict[str, Any]  # {"type": "text", "data"}, base64 PDF, url, or content blocks
    title: str | None = None
    context: str | None = None


class ToolUseBlock(Cacheable):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolReferenceBlock(AnthropicModel):
    """A deferred tool a client-side tool search found: from now on the tool is offered to the model."""

    type: Literal["tool_reference"]
    tool_name: str = Field(min_length=1)


ToolResultPart = Annotated[TextBlock | ToolReferenceBlock, Field(discriminator="type")]


class ToolResultBlock(Cacheable):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultPart] | None = None
    is_error: bool | None = None


class ThinkingBlock(AnthropicModel):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(AnthropicModel):
    type: Literal["redacted_thinking"]
    data: str


UserBlock = Annotated[TextBlock | ImageBlock | DocumentBlock | ToolResultBlock, Field(discriminator="type")]
AssistantBlock = Annotated[
    TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock, Field(discriminator="type")
]


class UserMessage(AnthropicModel):
    role: Literal["user"]
    content: str | Annotated[list[UserBlock], Field(min_length=1)]


class AssistantMessage(AnthropicModel):
    role: Literal["assistant"]
    content: str | list[AssistantBlock]


class SystemMessage(AnthropicModel):
    """A system turn inside the conversation (Claude Code's environment block, reminders): rendered
    as a system message where it occurs."""

    role: Literal["system"]
    content: str | Annotated[list[TextBlock], Field(min_length=1)]


InputMessage = Annotated[UserMessage | AssistantMessage | SystemMessage, Field(discriminator="role")]


# --- tools and options ---------------------------------------------------------------------


class Tool(Cacheable):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    strict: bool | None = None  # the input must match input_schema exactly
    # Advanced tool use: a deferred tool is left out of the prompt until a tool_reference names it.
    defer_loading: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    eager_input_streaming: bool | None = None


class ServerTool(Cacheable, LeftOut):
    """A tool the API runs itself (``web_search_20250305``, ``code_execution_...``, ``bash_...``):
    the gateway runs none, so it is left out of what the model sees and recorded as left out."""

    type: str = Field(min_length=1)
    name: str = Field(min_length=1)


def tool_kind(tool: Any) -> str:
    kind = tool.get("type") if isinstance(tool, dict) else getattr(tool, "type", None)
    return "custom" if kind in (None, "custom") else "server"


AnyTool = Annotated[Annotated[Tool, Tag("custom")] | Annotated[ServerTool, Tag("server")], Discriminator(tool_kind)]


class ToolChoice(AnthropicModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None  # required by (only meaningful for) type "tool"
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named_tool_has_a_name(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError('tool_choice of type "tool" needs the name of the tool')
        return self


class ThinkingConfig(AnthropicModel):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=0)
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _enabled_has_a_budget(self) -> ThinkingConfig:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError('thinking of type "enabled" needs budget_tokens')
        return self


class OutputConfig(AnthropicModel):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: dict[str, Any] | None = None  # {"type": "json_schema", "schema": {...}}


# --- context management (the API's history edits, applied by the gateway) ---------------------


class TurnCount(AnthropicModel):
    type: Literal["thinking_turns", "tool_uses"]
    value: int = Field(ge=0)


class TokenAmount(AnthropicModel):
    type: Literal["input_tokens", "tool_uses"]
    value: int = Field(ge=0)


class ClearThinkingEdit(AnthropicModel):
    """Drop thinking from all but the last ``keep`` assistant turns that have thinking (default 1)."""

    type: Literal["clear_thinking_20251015"]
    keep: Literal["all"] | TurnCount | None = None


class ClearToolUsesEdit(AnthropicModel):
    """Past ``trigger`` (default 100,000 input tokens), replace the results of all but the last
    ``keep`` tool uses (default 3) with a placeholder; ``clear_tool_inputs`` clears their inputs too."""

    type: Literal["clear_tool_uses_20250919"]
    trigger: TokenAmount | None = None
    keep: TurnCount | None = None
    clear_at_least: TokenAmount | None = None
    exclude_tools: list[str] | None = None
    clear_tool_inputs: bool | list[str] | None = None


ContextEdit = Annotated[ClearThinkingEdit | ClearToolUsesEdit, Field(discriminator="type")]


class ContextManagement(AnthropicModel):
    edits: list[ContextEdit] = Field(default_factory=list)


class Metadata(AnthropicModel):
    user_id: str | None = None


# --- requests ------------------------------------------------------------------------------


class PromptFields(AnthropicModel):
    """What decides the prompt: shared by Messages and count_tokens."""

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[AnyTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None
    context_management: ContextManagement | None = None


class MessagesRequest(PromptFields):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool | None = False
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None


class CountTokensRequest(PromptFields):
    pass


class TokenCount(AnthropicModel):
    input_tokens: int


# --- the answer ----------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class TextContent(AnthropicModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingContent(AnthropicModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""  # the engine does not sign its reasoning; clients echo it back unread


class ToolUseContent(AnthropicModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Annotated[ThinkingContent | TextContent | ToolUseContent, Field(discriminator="type")]


class Usage(AnthropicModel):
    input_tokens: int
    output_tokens: int


class Message(AnthropicModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock]
    model: str
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: Usage


# --- stream events -------------------------------------------------------------------------


class MessageStartEvent(AnthropicModel):
    type: Literal["message_start"] = "message_start"
    message: Message  # empty content and no stop_reason yet; usage carries input_tokens


class PingEvent(AnthropicModel):
    type: Literal["ping"] = "ping"


class ContentBlockStartEvent(AnthropicModel):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock  # text "", thinking "", or tool_use with input {}


class TextDelta(AnthropicModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class InputJsonDelta(AnthropicModel):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ThinkingDelta(AnthropicModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(AnthropicModel):
    type: Literal["signature_delta"] = "signature_delta"
    signature: str


BlockDelta = Annotated[TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta, Field(discriminator="type")]


class ContentBlockDeltaEvent(AnthropicModel):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: BlockDelta


class ContentBlockStopEvent(AnthropicModel):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDelta(AnthropicModel):
    stop_reason: StopReason | None
    stop_sequence: str | None = None


class DeltaUsage(AnthropicModel):
    output_tokens: int


class MessageDeltaEvent(AnthropicModel):
    type: Literal["message_delta"] = "message_delta"
    delta: MessageDelta
    usage: DeltaUsage


class MessageStopEvent(AnthropicModel):
    type: Literal["message_stop"] = "message_stop"
