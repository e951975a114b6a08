"""Serving the OpenAI dialect: validate, run the pipeline, answer in the client's shape."""

from __future__ import annotations

from gateway.dialects import CHAT
from gateway.errors import InvalidRequest
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest
from gateway.openai.stream import chat_stream_events, completion_stream_events
from gateway.recording.pipeline import ChatPipeline
from gateway.recording.streaming import ServedCall, StreamedAnswer
from gateway.request.notes import RequestNotes, recorded_request
from gateway.request.validated_history import ValidatedHistory
from gateway.request.validation import parse_request
from store.records import RolloutIdentity


class OpenAIServing:
    def __init__(self, pipeline: ChatPipeline, history: ValidatedHistory | None = None):
        self.pipeline = pipeline
        self.history = history or ValidatedHistory()  # the gateway's: each rollout's messages validated once

    async def chat(self, raw: dict, identity: RolloutIdentity) -> ServedCall | StreamedAnswer:
        request = self.history.parse(ChatCompletionRequest, raw, identity.rollout_id)
        recorded_raw = _recorded(raw, request)
        if request.stream:
            call = await self.pipeline.chat_stream(raw, identity, CHAT.name, recorded_raw, request.top_logprobs or 0)
            return StreamedAnswer(call, chat_stream_events(call, request, _include_usage(request)))
        recorded = await self.pipeline.chat(raw, identity, CHAT.name, recorded_raw, request.top_logprobs or 0)
        return ServedCall(recorded.call_id, _client_chat(recorded.answer, request))

    async def completions(self, raw: dict, identity: RolloutIdentity) -> ServedCall | StreamedAnswer:
        request = parse_request(CompletionRequest, raw)
        if request.echo:
            raise InvalidRequest("echo is not supported by the recording gateway", param="echo")
        if request.best_of not in (None, 1):
            raise InvalidRequest("only best_of=1 is supported", param="best_of")
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        recorded_raw = _recorded(raw, request)
        if request.stream:
            call = await self.pipeline.completion_stream(
                {**raw, "prompt": prompt}, identity, recorded_raw, request.logprobs or 0
            )
            return StreamedAnswer(call, completion_stream_events(call, request, _include_usage(request)))
        recorded = await self.pipeline.completion(
            {**raw, "prompt": prompt}, identity, recorded_raw, request.logprobs or 0
        )
        return ServedCall(recorded.call_id, _client_completion(recorded.answer, request))


def _recorded(raw: dict, request: ChatCompletionRequest | CompletionRequest) -> dict:
    """The body as the store keeps it, less its large undeclared fields (``gateway.request.unknown_fields``);
    the engine is sent it as received. Most bodies declare every field: they are kept as they are."""
    undeclared = request.model_extra
    return recorded_request(raw, RequestNotes(), undeclared) if undeclared else raw


def _include_usage(request: ChatCompletionRequest | CompletionRequest) -> bool:
    return bool(request.stream_options and request.stream_options.include_usage)


def _client_chat(answer: dict, request: ChatCompletionRequest) -> dict:
    """The engine's answer as the client asked for it: its model name, only what it requested."""
    choice = dict(answer["choices"][0])
    if not request.logprobs:
        choice["logprobs"] = None
    if not request.return_token_ids:
        choice.pop("token_ids", None)
    body = {**answer, "model": request.model, "choices": [choice]}
    if not request.return_token_ids:
        body.pop("prompt_token_ids", None)
    return body


def _client_completion(answer: dict, request: CompletionRequest) -> dict:
    choice = dict(answer["choices"][0])
    if request.logprobs is None:
        choice["logprobs"] = None
    if not request.return_token_ids:
        choice.pop("token_ids", None)
        choice.pop("prompt_token_ids", None)
    return {**answer, "model": request.model, "choices": [choice]}
