"""Anthropic Messages wire models (requests, the Message answer, stream events), mirroring the spec.

Requests allow extra fields: Anthropic clients send fields for features the gateway does not serve
(``cache_control``, ``container``, ``service_tier``, ``context_management``...); they are accepted
and stored with the call, but only the fields below shape the engine call. Field types are still
checked, so a wrong type is a 400 before anything reaches the engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AnthropicModel(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- content blocks (request) --------------------------------------------------------------


class TextBlock(AnthropicModel):
    type: Literal["text"]
    text: str


class ImageBlock(AnthropicModel):
    type: Literal["image"]
    source: dict[str, Any]  # {"type": "base64", "media_type", "data"} or {"type": "url", "url"}


class DocumentBlock(AnthropicModel):
    type: Literal["document"]
    source: dict[str, Any]  # {"type": "text", "data"}, base64 PDF, url, or content blocks
    title: str | None = None
    context: str | None = None


class ToolUseBlock(AnthropicModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(AnthropicModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(AnthropicModel):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(AnthropicModel):
    type: Literal["redacted_thinking"]
    data: str


UserBlock = Annotated[TextBlock | ImageBlock | DocumentBlock | ToolResultBlock, Field(discriminator="type")]
AssistantBlock = Annotated[TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock,
                           Field(discriminator="type")]


class UserMessage(AnthropicModel):
    role: Literal["user"]
    content: str | Annotated[list[UserBlock], Field(min_length=1)]


class AssistantMessage(AnthropicModel):
    role: Literal["assistant"]
    content: str | list[AssistantBlock]


InputMessage = Annotated[UserMessage | AssistantMessage, Field(discriminator="role")]


# --- tools and options ---------------------------------------------------------------------


class Tool(AnthropicModel):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    strict: bool | None = None  # the input must match input_schema exactly


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


# --- requests ------------------------------------------------------------------------------


class PromptFields(AnthropicModel):
    """What decides the prompt: shared by Messages and count_tokens."""

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesRequest(PromptFields):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool | None = False
    metadata: dict[str, Any] | None = None


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
