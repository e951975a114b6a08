"""Serving the OpenAI dialect: forward to the engine with token ids, record, answer the client."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from gateway.engine.client import EngineClient
from gateway.errors import EngineError, InvalidRequest, describe_validation_error
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest
from gateway.policy import PolicyRegistry, ResolvedModel
from gateway.store.records import CallRecord, RolloutIdentity
from gateway.store.writer import CallWriter

RequestT = TypeVar("RequestT", bound=BaseModel)


@dataclass(frozen=True)
class ServedCall:
    """What a route needs to answer: the client's body and where the call was recorded."""

    call_id: int
    body: dict  # the response in the client's shape (non-streaming form)
    stream: bool
    include_usage: bool


def parse_request(model: type[RequestT], raw: dict) -> RequestT:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        message, param = describe_validation_error(exc)
        raise InvalidRequest(message, param=param) from None


class OpenAIServing:
    def __init__(self, engine: EngineClient, policy: PolicyRegistry, writer: CallWriter):
        self.engine, self.policy, self.writer = engine, policy, writer

    async def chat(self, raw: dict, identity: RolloutIdentity) -> ServedCall:
        request = parse_request(ChatCompletionRequest, raw)
        resolved = self.policy.resolve(request.model)
        body = {**raw, "model": resolved.engine_model, "stream": False, "return_token_ids": True,
                "logprobs": True, "top_logprobs": request.top_logprobs or 0}
        body.pop("stream_options", None)
        answer, latency_ms = await self._timed(self.engine.chat(body))
        choice = _only_choice(answer)
        logprobs = [entry["logprob"] for entry in (choice.get("logprobs") or {}).get("content") or []]
        record = self._record(identity, "chat", raw, resolved, answer, latency_ms,
                              answer.get("prompt_token_ids"), choice, logprobs)
        call_id = await self.writer.record(record)
        return ServedCall(call_id, _client_chat(answer, request), bool(request.stream),
                          _include_usage(request))

    async def completions(self, raw: dict, identity: RolloutIdentity) -> ServedCall:
        request = parse_request(CompletionRequest, raw)
        if request.echo:
            raise InvalidRequest("echo is not supported by the recording gateway", param="echo")
        if request.best_of not in (None, 1):
            raise InvalidRequest("only best_of=1 is supported", param="best_of")
        resolved = self.policy.resolve(request.model)
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        body = {**raw, "model": resolved.engine_model, "prompt": prompt, "stream": False,
                "return_token_ids": True, "logprobs": request.logprobs or 0}
        body.pop("stream_options", None)
        answer, latency_ms = await self._timed(self.engine.completions(body))
        choice = _only_choice(answer)
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        record = self._record(identity, "completions", raw, resolved, answer, latency_ms,
                              choice.get("prompt_token_ids"), choice, logprobs)
        call_id = await self.writer.record(record)
        return ServedCall(call_id, _client_completion(answer, request), bool(request.stream),
                          _include_usage(request))

    @staticmethod
    async def _timed(awaitable) -> tuple[dict, float]:
        started = time.perf_counter()
        answer = await awaitable
        return answer, (time.perf_counter() - started) * 1000.0

    @staticmethod
    def _record(identity: RolloutIdentity, dialect: str, raw: dict, resolved: ResolvedModel,
                answer: dict, latency_ms: float, prompt_ids: list[int] | None, choice: dict,
                logprobs: list[float]) -> CallRecord:
        output_ids = choice.get("token_ids")
        if prompt_ids is None or output_ids is None:
            raise EngineError(502, "engine did not return token ids (return_token_ids); the "
                                   "gateway needs vLLM >= 0.10.2 to record calls")
        return CallRecord(
            rollout_id=identity.rollout_id, dialect=dialect, model=resolved.public_name,
            engine_model=resolved.engine_model, policy_version=resolved.version,
            prompt_ids=prompt_ids, output_ids=output_ids, output_logprobs=logprobs,
            finish_reason=choice.get("finish_reason"), request=raw, response=answer,
            latency_ms=latency_ms,
        )


def _only_choice(answer: dict) -> dict:
    choices = answer.get("choices") or []
    if len(choices) != 1:
        raise EngineError(502, f"engine returned {len(choices)} choices, expected 1")
    return choices[0]


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
