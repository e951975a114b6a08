"""The fake engine's streamed answers, chunked as vLLM 0.32 streams them (see tests/fake_engine.py)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

from tests.fake_tokens import (
    FakeReply,
    arguments_text,
    logprob_at,
    logprob_entry,
    think_text,
    tool_call_text,
    usage,
)

if TYPE_CHECKING:  # annotations only: the engine imports this module
    from tests.fake_engine import FakeEngine


def chat_chunks(engine: FakeEngine, body: dict, reply: FakeReply, prompt_ids: list[int], ids: list[int]):
    """The SSE events of a streamed chat answer, as vLLM sends them."""
    base = {
        "id": f"chatcmpl-{next(engine._ids)}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body["model"],
    }
    ask_ids, ask_logprobs = body.get("return_token_ids"), body.get("logprobs")
    start = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    yield {**base, "choices": [start], **({"prompt_token_ids": prompt_ids} if ask_ids else {})}
    for first, delta, finish in deltas(engine, reply, ids):
        piece = ids[first : first + len(delta.pop("_ids"))]
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": finish,
            "logprobs": {"content": [logprob_entry(engine, i, first + n) for n, i in enumerate(piece)]}
            if ask_logprobs
            else None,
        }
        if ask_ids:
            choice["token_ids"] = piece
        if finish:
            choice["stop_reason"] = None
        yield {**base, "choices": [choice]}
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": usage(len(prompt_ids), len(ids))}


def deltas(engine: FakeEngine, reply: FakeReply, ids: list[int]):
    """(first token index, delta with its tokens under ``_ids``, finish reason) for each chunk."""
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    if reply.raw_text is not None:  # exact sampled text: one chunk, the message as the non-streamed one
        yield 0, {"content": reply.content, "_ids": ids}, finish
        return
    position = 0
    if reply.reasoning:  # the think tags in the first and last reasoning chunks
        think = engine.encode_text(think_text(reply.reasoning))
        yield position, {"reasoning": reply.reasoning, "_ids": think}, None
        position += len(think)
    for i in engine.encode_text(reply.content):  # one token a chunk
        yield position, {"content": engine.decode_ids([i]), "_ids": [i]}, None
        position += 1
    for index, (name, args) in enumerate(reply.tool_calls):
        call_ids = engine.encode_text(tool_call_text(name, args))
        arguments = arguments_text(args)
        half, third = len(arguments) // 2, len(call_ids) // 3
        pieces = [
            (
                {
                    "id": f"chatcmpl-tool-{next(engine._ids)}",
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                },
                call_ids[:third],
            ),
            ({"function": {"arguments": arguments[:half]}}, call_ids[third : 2 * third]),
            ({"function": {"arguments": arguments[half:]}}, call_ids[2 * third :]),
        ]
        for call, piece in pieces:
            yield position, {"tool_calls": [{"index": index, **call}], "_ids": piece}, None
            position += len(piece)
    yield position, {"_ids": ids[position:]}, finish


async def paced(engine: FakeEngine, chunks):
    """The chunks as SSE, ``token_delay_s`` apart; a client that leaves stops the generation."""
    finished = False
    try:
        for n, chunk in enumerate(chunks):
            yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
            if n == 0 and engine.stream_gate is not None:
                engine.stream_started.set()
                await asyncio.to_thread(engine.stream_gate.wait)
            if engine.token_delay_s:
                await asyncio.sleep(engine.token_delay_s)
        yield "data: [DONE]\n\n"
        finished = True
    finally:
        if not finished:
            engine.streams_aborted += 1


def completion_chunks(engine: FakeEngine, body: dict, prompt_ids: list[int], ids: list[int]):
    """A streamed completion as vLLM sends it: one sampled token a chunk, ``prompt_token_ids`` on the first."""
    base = {
        "id": f"cmpl-{next(engine._ids)}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body["model"],
    }
    for n, token in enumerate(ids):
        text = engine.decode_ids([token])
        choice = {
            "index": 0,
            "text": text,
            "finish_reason": "stop" if n == len(ids) - 1 else None,
            "logprobs": {"tokens": [text], "token_logprobs": [logprob_at(n)], "top_logprobs": [{}], "text_offset": [n]},
            "token_ids": [token],
        }
        if n == 0:
            choice["prompt_token_ids"] = prompt_ids
        yield {**base, "choices": [choice]}
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": usage(len(prompt_ids), len(ids))}
