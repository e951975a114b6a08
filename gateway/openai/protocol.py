"""OpenAI wire models (Chat Completions, Completions, Models), mirroring the public spec.

Requests allow extra fields: agents and SDKs send vendor extensions (``top_k``,
``chat_template_kwargs``, ``metadata``...) that are forwarded to vLLM untouched. Field types are
still checked, so a wrong type is a 400 before anything reaches the engine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- chat messages -------------------------------------------------------------------------


class TextPart(OpenAIModel):
    type: Literal["text"]
    text: str


class ImagePart(OpenAIModel):
    type: Literal["image_url"]
    image_url: dict[str, Any]


class AudioPart(OpenAIModel):
    type: Literal["input_audio"]
    input_audio: dict[str, Any]


class FilePart(OpenAIModel):
    type: Literal["file"]
    file: dict[str, Any]


class RefusalPart(OpenAIModel):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[TextPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]


class FunctionCall(OpenAIModel):
    name: str
    arguments: str


class ToolCall(OpenAIModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(OpenAIModel):
    role: Literal["system"]
    content: str | list[TextPart]
    name: str | None = None


class DeveloperMessage(OpenAIModel):
    role: Literal["developer"]
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(OpenAIModel):
    role: Literal["user"]
    content: str | list[ContentPart]
    name: str | None = None


class AssistantMessage(OpenAIModel):
    role: Literal["assistant"]
    content: str | list[AssistantPart] | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None
    name: str | None = None
    # Extension (vLLM, DeepSeek): the reasoning the model produced before its answer.
    reasoning_content: str | None = None


class ToolMessage(OpenAIModel):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str


class FunctionMessage(OpenAIModel):
    role: Literal["function"]
    content: str | None
    name: str


ChatMessage = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Field(discriminator="role"),
]


# --- tools ---------------------------------------------------------------------------------


class FunctionDefinition(OpenAIModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(OpenAIModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(OpenAIModel):
    name: str


class NamedToolChoice(OpenAIModel):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(OpenAIModel):
    include_usage: bool | None = None


# --- requests ------------------------------------------------------------------------------


class SamplingFields(OpenAIModel):
    model: str
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    n: int | None = 1
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = None
    user: str | None = None
    logit_bias: dict[str, float] | None = None
    # Extension (vLLM): return prompt_token_ids and token_ids to the client too.
    return_token_ids: bool | None = None

    @field_validator("n")
    @classmethod
    def _single_choice(cls, n: int | None) -> int | None:
        if n not in (None, 1):
            raise ValueError("only n=1 is supported (each sample is its own rollout call)")
        return n


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None


# A token id as the store packs it (int32); vLLM refuses ids beyond its vocabulary.
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]


class CompletionRequest(SamplingFields):
    # A string, a list of strings, a list of token ids, or a list of token-id lists; one prompt only.
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, prompt):
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise ValueError("only one prompt per request is supported")
        if isinstance(prompt, list) and not prompt:
            raise ValueError("prompt must not be empty")
        return prompt


# --- responses -----------------------------------------------------------------------------


class ModelCard(OpenAIModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "harnessrl"
    # Extensions (vLLM): the engine's context limit and which base an adapter extends.
    max_model_len: int | None = None
    root: str | None = None
    parent: str | None = None


class ModelList(OpenAIModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
