"""Replaying a finished answer to a client that asked for a stream (Server-Sent Events).

The upstream call is complete before the first byte is sent, so the replay emits few, whole
chunks: the content in one delta and each tool call whole in its own chunk (clients that merge
partial tool-call deltas badly still parse it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

DONE = "data: [DONE]\n\n"


def _event(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def chat_chunks(body: dict, include_usage: bool) -> Iterator[str]:
    """Chat Completions SSE for a non-streaming ``chat.completion`` body."""
    choice = body["choices"][0]
    message = choice.get("message") or {}
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
    if include_usage:
        base["usage"] = None  # the spec: null on every chunk but the last

    def chunk(delta: dict, finish_reason: str | None = None, logprobs: dict | None = None) -> str:
        return _event(
            {**base, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]}
        )

    yield chunk({"role": "assistant", "content": ""})
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        yield chunk({"reasoning_content": reasoning})
    if message.get("content") or choice.get("logprobs"):
        yield chunk({"content": message.get("content") or ""}, logprobs=choice.get("logprobs"))
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk(
            {"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": call["function"]}]}
        )
    extra = {k: body[k] for k in ("prompt_token_ids",) if k in body}
    final = {
        **base,
        **extra,
        "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")}],
    }
    if "token_ids" in choice:
        final["choices"][0]["token_ids"] = choice["token_ids"]
    yield _event(final)
    if include_usage:
        yield _event({**base, "choices": [], "usage": body.get("usage")})
    yield DONE


def completion_chunks(body: dict, include_usage: bool) -> Iterator[str]:
    """Completions SSE for a non-streaming ``text_completion`` body."""
    choice = body["choices"][0]
    base = {"id": body["id"], "object": "text_completion", "created": body["created"], "model": body["model"]}
    if include_usage:
        base["usage"] = None
    text_choice = {
        "index": 0,
        "text": choice.get("text") or "",
        "logprobs": choice.get("logprobs"),
        "finish_reason": None,
    }
    for key in ("prompt_token_ids", "token_ids"):
        if key in choice:
            text_choice[key] = choice[key]
    yield _event({**base, "choices": [text_choice]})
    yield _event(
        {**base, "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": choice.get("finish_reason")}]}
    )
    if include_usage:
        yield _event({**base, "choices": [], "usage": body.get("usage")})
    yield DONE
