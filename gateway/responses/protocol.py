"""OpenAI Responses wire models (``/v1/responses``), mirroring the public spec.

Only the stateless subset is served: the client sends its whole conversation as ``input`` every
time (``store`` is accepted and ignored, ``previous_response_id`` is refused). Tools are what Codex
CLI sends: ``function`` tools, ``namespace`` tools grouping functions, ``custom`` (freeform) tools with
one string input, and hosted tools (``web_search``...) that the gateway cannot run, left out of what
the model sees and recorded as left out. Requests allow extra fields; they are accepted and recorded
(``_gateway.ignored_fields``), while the types and values of the fields below are checked, so a
malformed value is a 400 before anything reaches the engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from gateway.request.notes import LeftOut


class ResponsesModel(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- input content parts -------------------------------------------------------------------


class InputText(ResponsesModel):
    type: Literal["input_text"]
    text: str


class OutputText(ResponsesModel):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] = Field(default_factory=list)


class InputImage(ResponsesModel):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto"] | None = None


ContentPart = Annotated[InputText | OutputText | InputImage, Field(discriminator="type")]


# --- input items ---------------------------------------------------------------------------


class MessageItem(ResponsesModel):
    type: Literal["message"] = "message"  # optional on the wire ("easy input message")
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(ResponsesModel):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None  # the namespace tool the function belongs to
    id: str | None = None
    status: str | None = None


class CustomToolCallItem(ResponsesModel):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    input: str
    id: str | None = None
    status: str | None = None


class CustomToolCallOutputItem(ResponsesModel):
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[InputText]
    id: str | None = None


class FunctionCallOutputItem(ResponsesModel):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputText]
    id: str | None = None
    status: str | None = None


class SummaryText(ResponsesModel):
    type: Literal["summary_text"]
    text: str


class ReasoningText(ResponsesModel):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(ResponsesModel):
    type: Literal["reasoning"]
    id: str | None = None  # Codex CLI does not send it back
    summary: list[SummaryText]
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


def item_type(item: Any) -> str | None:
    """The item's ``type``; message items may leave it out."""
    if isinstance(item, dict):
        return item.get("type", "message")
    return getattr(item, "type", None)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[CustomToolCallItem, Tag("custom_tool_call")]
    | Annotated[CustomToolCallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(item_type),
]


# --- tools ---------------------------------------------------------------------------------


class FunctionTool(ResponsesModel):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomTool(ResponsesModel):
    """A freeform tool: its input is one string (``format``: plain text or a grammar it must match)."""

    type: Literal["custom"]
    name: str
    description: str | None = None
    format: dict[str, Any] | None = None  # {"type": "text"} | {"type": "grammar", "syntax", "definition"}


class NamespaceTool(ResponsesModel):
    """Functions grouped under a name (Codex's ``multi_agent_v1``): each is offered to the model, and
    a call to one comes back as a function_call naming its ``namespace``."""

    type: Literal["namespace"]
    name: str
    description: str | None = None
    tools: list[Annotated[FunctionTool | CustomTool, Field(discriminator="type")]] = Field(min_length=1)


class HostedTool(ResponsesModel, LeftOut):
    """A tool the API runs itself (web_search, file_search, code_interpreter, image_generation, mcp...)."""

    type: str = Field(min_length=1)
    name: str | None = None


def tool_type(tool: Any) -> str:
    kind = tool.get("type") if isinstance(tool, dict) else getattr(tool, "type", None)
    return kind if kind in ("function", "custom", "namespace") else "hosted"


AnyTool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[CustomTool, Tag("custom")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[HostedTool, Tag("hosted")],
    Discriminator(tool_type),
]


class ToolChoiceFunction(ResponsesModel):
    type: Literal["function", "custom"]
    name: str


class ReasoningConfig(ResponsesModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


# --- request -------------------------------------------------------------------------------


class ResponsesRequest(ResponsesModel):
    model: str
    # A string on the wire is one user message; it is parsed as that item so the union of the two
    # shapes does not double every error message.
    input: list[InputItem]
    instructions: str | None = None
    tools: list[AnyTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stream: bool | None = False
    store: bool | None = None
    previous_response_id: str | None = None
    text: dict[str, Any] | None = None
    reasoning: ReasoningConfig | None = None
    include: list[str] | None = None  # "reasoning.encrypted_content": reasoning comes back as an opaque value
    metadata: dict[str, str] | None = None
    client_metadata: dict[str, str] | None = None  # recorded; Codex's session and turn ids
    prompt_cache_key: str | None = None  # a routing hint; a rollout already sticks to one engine
    service_tier: str | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _items(cls, value):
        if not isinstance(value, (str, list)):
            raise ValueError("input must be a string or a list of input items")
        if not value:
            raise ValueError("input must not be empty")
        return [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else value


# --- response ------------------------------------------------------------------------------


class OutputMessage(ResponsesModel):
    type: Literal["message"] = "message"
    id: str
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    content: list[OutputText]


class OutputFunctionCall(ResponsesModel):
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    namespace: str | None = Field(default=None, exclude_if=lambda value: value is None)


class OutputCustomToolCall(ResponsesModel):
    type: Literal["custom_tool_call"] = "custom_tool_call"
    id: str
    call_id: str
    name: str
    input: str
    status: Literal["in_progress", "completed", "incomplete"] = "completed"


class OutputReasoning(ResponsesModel):
    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    # With include ["reasoning.encrypted_content"]: an opaque value naming the call whose sampled
    # tokens hold this reasoning, and its text (gateway.responses.reasoning).
    encrypted_content: str | None = Field(default=None, exclude_if=lambda value: value is None)


OutputItem = Annotated[
    OutputMessage | OutputFunctionCall | OutputCustomToolCall | OutputReasoning, Field(discriminator="type")
]


class InputTokensDetails(ResponsesModel):
    cached_tokens: int = 0


class OutputTokensDetails(ResponsesModel):
    reasoning_tokens: int = 0


class ResponseUsage(ResponsesModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(ResponsesModel):
    reason: Literal["max_output_tokens", "content_filter"]


class Response(ResponsesModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "incomplete", "in_progress"]
    incomplete_details: IncompleteDetails | None = None
    error: dict[str, Any] | None = None
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None = None
    # The request's settings, echoed (the SDK's Response requires tools, tool_choice,
    # parallel_tool_calls).
    instructions: str | None = None
    tools: list[dict[str, Any]]  # as the client sent them
    tool_choice: Literal["auto", "none", "required"] | ToolChoiceFunction
    parallel_tool_calls: bool
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    previous_response_id: None = None
    reasoning: ReasoningConfig | None = None
    text: dict[str, Any]
    truncation: Literal["auto", "disabled"]
    metadata: dict[str, str]
    user: str | None = None
    store: bool = False  # nothing is kept for previous_response_id or GET /v1/responses/{id}
    background: bool = False
