"""Chat Completions (and Completions) stream-through: the engine's chunks, as the client asked for them, as they arrive.

Each engine chunk goes out at once with the client's model name and only what it requested (token
ids, logprobs, usage). The chunks that end the answer (the finish reason, usage) and ``[DONE]`` are
held until the call is committed; an SSE comment naming the call id goes out with them (the call id
header is sent before the call exists).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from gateway.engine.client import encoded
from gateway.errors import GatewayError, error_body
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest
from gateway.recording.streaming import CALL_ID_COMMENT, Committed, StreamedCall

DONE = "data: [DONE]\n\n"


def _event(payload: dict) -> bytes:
    return b"data: " + encoded(payload) + b"\n\n"


def chat_stream_events(call: StreamedCall, request: ChatCompletionRequest, include_usage: bool) -> AsyncIterator[bytes]:
    return _events(call, _ClientShape(request, include_usage))


def completion_stream_events(
    call: StreamedCall, request: CompletionRequest, include_usage: bool
) -> AsyncIterator[bytes]:
    return _events(call, _CompletionShape(request, include_usage))


async def _events(call: StreamedCall, shape: Callable[[dict], dict | None]) -> AsyncIterator[bytes]:
    held: list[bytes] = []  # the answer's last chunks: out once the call is committed
    try:
        async for batch in call.chunks():
            if isinstance(batch, Committed):
                yield CALL_ID_COMMENT.format(batch.call_id).encode() + b"".join(held) + DONE.encode()
                return
            out = []
            for item in batch:
                chunk = shape(item)
                if chunk is None:
                    continue
                final = not chunk["choices"] or chunk["choices"][0].get("finish_reason") is not None
                (held if final else out).append(_event(chunk))
            if out:
                yield b"".join(out)  # what arrived together leaves together: one write
    except GatewayError as exc:  # the engine failed mid-answer: the client's SDK raises this
        yield _event(error_body(exc))


class _ClientShape:
    """An engine chunk as this client sees it, or None when nothing of it is for the client."""

    def __init__(self, request: ChatCompletionRequest, include_usage: bool):
        self.model, self.include_usage = request.model, include_usage
        self.ids, self.logprobs = bool(request.return_token_ids), bool(request.logprobs)

    def __call__(self, chunk: dict) -> dict | None:
        out = {**chunk, "model": self.model}
        if not self.ids:
            out.pop("prompt_token_ids", None)
        if not out.get("choices"):  # the usage chunk
            return out if self.include_usage and out.get("usage") else None
        if self.include_usage:
            out["usage"] = None  # the spec: null on every chunk but the last
        else:
            out.pop("usage", None)
        choice = dict(out["choices"][0])
        if not self.ids:
            choice.pop("token_ids", None)
        if not self.logprobs:
            choice["logprobs"] = None
        if not (
            choice.get("delta") or choice.get("logprobs") or choice.get("finish_reason") or choice.get("token_ids")
        ):
            return None  # a chunk that carried only what this client did not ask for
        out["choices"] = [choice]
        return out


class _CompletionShape:
    """A Completions chunk as this client sees it (its model name, ids and logprobs only if asked)."""

    def __init__(self, request: CompletionRequest, include_usage: bool):
        self.model, self.include_usage = request.model, include_usage
        self.ids, self.logprobs = bool(request.return_token_ids), request.logprobs is not None

    def __call__(self, chunk: dict) -> dict | None:
        out = {**chunk, "model": self.model}
        if not out.get("choices"):  # the usage chunk
            return out if self.include_usage and out.get("usage") else None
        if self.include_usage:
            out["usage"] = None
        else:
            out.pop("usage", None)
        choice = dict(out["choices"][0])
        if not self.ids:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
        if not self.logprobs:
            choice["logprobs"] = None
        out["choices"] = [choice]
        return out
