"""What the engine is sent for a call: the client's body on the resolved engine model (the policy's
adapter or the base model), with the recording fields on (sampled ids, their log-probs)."""

from __future__ import annotations

from gateway.policy.registry import ResolvedModel


def engine_chat_body(chat_body: dict, resolved: ResolvedModel, top_logprobs: int, stream: bool) -> dict:
    """What the engine is sent for a chat call: the recording fields on (sampled ids, their logprobs)."""
    return _engine_body(chat_body, resolved, stream, logprobs=True, top_logprobs=top_logprobs)


def engine_completion_body(completion_body: dict, resolved: ResolvedModel, logprobs: int, stream: bool) -> dict:
    """What the engine is sent for a completion call (Completions counts its top logprobs in ``logprobs``)."""
    return _engine_body(completion_body, resolved, stream, logprobs=logprobs)


def _engine_body(client_body: dict, resolved: ResolvedModel, stream: bool, **logprobs) -> dict:
    """The client's body on the resolved engine model with token ids returned; when streaming, the
    usage chunk too (a non-streaming request must not carry ``stream_options``)."""
    body = {**client_body, "model": resolved.engine_model, "stream": stream, "return_token_ids": True, **logprobs}
    if stream:
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream_options", None)
    return body
