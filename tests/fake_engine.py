"""An in-process fake engine speaking the subset of vLLM's HTTP API the gateway uses.

For fast unit tests and benchmarks only (zero latency, deterministic). Its "tokenizer" maps each
UTF-8 byte to one id, so tests can check ids against text exactly. Scripted replies let tests
drive exact scenarios (a planned tool call, then a final answer). Streaming chat requests get chunks
shaped like vLLM 0.32's with ``return_token_ids``: ``prompt_token_ids`` on the first chunk, then each
sampled token's ``token_ids``, logprobs and text delta (tool calls as deltas: id and name, then the
arguments in pieces), the finish reason on the last, a usage chunk when asked, ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.recording.capture_probe import PROBE_USER

BYTE_OFFSET = 3  # ids 0..2 are special: 0 = <|endoftext|>, 1 = <|im_start|>, 2 = <|im_end|>
IM_START, IM_END = 1, 2


@dataclass(frozen=True)
class FakeReply:
    content: str = ""
    tool_calls: tuple[tuple[str, dict | str], ...] = ()  # (function name, arguments: an object or exact text)
    reasoning: str = ""  # what a reasoning parser separated out (streamed first, as reasoning deltas)
    finish_reason: str | None = None  # default: "tool_calls" when calling tools, else "stop"
    raw_text: str | None = None  # exact sampled text, overriding content + tool_calls (for tito tests)


def _think(reasoning: str) -> str:
    return f"<think>{reasoning}</think>" if reasoning else ""


def _tool_call_text(name: str, args: dict | str) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def _arguments(args: dict | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def encode(text: str) -> list[int]:
    return [b + BYTE_OFFSET for b in text.encode()]


def decode(ids: list[int]) -> str:
    return bytes(i - BYTE_OFFSET for i in ids if i >= BYTE_OFFSET).decode(errors="replace")


def logprob_at(position: int) -> float:
    """Deterministic fake logprob of the sampled token at ``position`` of the output."""
    return -0.125 * (position % 7)


def next_logprob_at(position: int) -> float:
    """The base model's fake log-prob of the likeliest token after a prompt of ``position`` tokens."""
    return -0.25 - 0.5 * (position % 5)


def render_chat(messages: list[dict]) -> list[int]:
    """ChatML-shaped token ids of the conversation plus the generation prompt."""
    ids: list[int] = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        for call in message.get("tool_calls") or []:
            content += f"<tool_call>{json.dumps(call['function'])}</tool_call>"
        ids += [IM_START, *encode(f"{message['role']}\n{content}"), IM_END, *encode("\n")]
    return ids + [IM_START, *encode("assistant\n")]


@dataclass
class FakeEngine:
    """Engine state: the served name, its context limit, a reply script and loaded adapters."""

    model: str = "fake-base"
    max_model_len: int = 4096
    script: Callable[[dict], FakeReply] | list[FakeReply] | None = None
    adapters: dict[str, str] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)  # every body received, for assertions
    record_requests: bool = True
    delay_s: float = 0.0  # seconds each chat/completions call takes (a slow or hung engine)
    token_delay_s: float = 0.0  # seconds between streamed chunks (a slow generation)
    omit: frozenset[str] = frozenset()  # recording fields left out of answers (an old or misconfigured vLLM)
    streams_aborted: int = 0  # streams whose client went away before their end
    load_error: str | None = None  # when set, loading an adapter fails with this message
    # Every loaded adapter moves each prompt log-prob by this many nats (what a probe measures);
    # ``ignore_loads``: a load answers 200 but the adapter is never applied (the base model serves it).
    adapter_shift: float = -0.5
    ignore_loads: bool = False
    # The "tokenizer" of sampled text: bytes by default; tito tests plug in a real model's.
    encode_text: Callable[[str], list[int]] = encode
    decode_ids: Callable[[list[int]], str] = decode
    _ids: itertools.count = field(default_factory=itertools.count)

    def restart(self) -> None:
        """What an engine restart does to the gateway's view: every runtime-loaded adapter is gone."""
        self.adapters.clear()

    def next_reply(self, body: dict) -> FakeReply:
        if callable(self.script):
            return self.script(body)
        if self.script:
            return self.script.pop(0)
        return FakeReply(content="Hello from the fake engine.")

    def output_ids(self, reply: FakeReply) -> list[int]:
        text = (
            reply.raw_text
            if reply.raw_text is not None
            else _think(reply.reasoning)
            + reply.content
            + "".join(_tool_call_text(name, args) for name, args in reply.tool_calls)
        )
        return [*self.encode_text(text), IM_END]

    def too_long(self, num_prompt: int, max_tokens: int | None) -> Response | None:
        if num_prompt + (max_tokens or 1) <= self.max_model_len:
            return None
        message = (
            f"This model's maximum context length is {self.max_model_len} tokens. However, your "
            f"request has {num_prompt} input tokens. Please reduce the length of the input messages."
        )
        return JSONResponse(
            {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}},
            status_code=400,
        )

    def check_model(self, name: str) -> Response | None:
        if name == self.model or name in self.adapters:
            return None
        return JSONResponse(
            {
                "error": {
                    "message": f"The model `{name}` does not exist.",
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                }
            },
            status_code=404,
        )


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chat_choice(engine: FakeEngine, reply: FakeReply, ids: list[int]) -> dict:
    tool_calls = [
        {
            "id": f"chatcmpl-tool-{next(engine._ids)}",
            "type": "function",
            "function": {"name": name, "arguments": _arguments(args)},
        }
        for name, args in reply.tool_calls
    ]
    content = [
        {
            "token": engine.decode_ids([i]) if i != IM_END else "<|im_end|>",
            "logprob": logprob_at(n),
            "bytes": None,
            "top_logprobs": [],
        }
        for n, i in enumerate(ids)
    ]
    return {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": reply.content or None,
            "tool_calls": tool_calls,
            "reasoning": reply.reasoning or None,
        },
        "logprobs": {"content": content},
        "finish_reason": reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
        "stop_reason": None,
        "token_ids": ids,
    }


async def _chat(request: Request) -> Response:
    engine: FakeEngine = request.app.state.engine
    body = json.loads(await request.body())
    await asyncio.sleep(engine.delay_s)
    probe = body.get("user") == PROBE_USER  # the gateway's capture probe: neither recorded nor scripted
    if engine.record_requests and not probe:
        engine.requests.append(body)
    error = engine.check_model(body.get("model", ""))
    prompt_ids = render_chat(body["messages"])
    error = error or engine.too_long(len(prompt_ids), body.get("max_tokens"))
    if error:
        return error
    reply = FakeReply(content="OK") if probe else engine.next_reply(body)
    ids = engine.output_ids(reply)
    if body.get("stream"):
        chunks = (_omitted(engine.omit, chunk) for chunk in _chat_chunks(engine, body, reply, prompt_ids, ids))
        return StreamingResponse(_paced(engine, chunks), media_type="text/event-stream")
    return JSONResponse(
        _omitted(
            engine.omit,
            {
                "id": f"chatcmpl-{next(engine._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [_chat_choice(engine, reply, ids)],
                "usage": _usage(len(prompt_ids), len(ids)),
                "prompt_logprobs": None,
                "prompt_token_ids": prompt_ids,
            },
        )
    )


def _omitted(omit: frozenset[str], answer: dict) -> dict:
    """``answer`` without the recording fields named in ``omit`` (as an engine that lacks them)."""
    if not omit:
        return answer
    answer = {k: v for k, v in answer.items() if k not in omit}
    choices = []
    for choice in answer.get("choices") or []:
        choice = {k: v for k, v in choice.items() if k not in omit or k == "logprobs"}
        if "logprobs" in omit:
            choice["logprobs"] = None
        choices.append(choice)
    answer["choices"] = choices
    return answer


def _chat_chunks(engine: FakeEngine, body: dict, reply: FakeReply, prompt_ids: list[int], ids: list[int]):
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
    for first, delta, finish in _deltas(engine, reply, ids):
        piece = ids[first : first + len(delta.pop("_ids"))]
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": finish,
            "logprobs": {"content": [_logprob_entry(engine, i, first + n) for n, i in enumerate(piece)]}
            if ask_logprobs
            else None,
        }
        if ask_ids:
            choice["token_ids"] = piece
        if finish:
            choice["stop_reason"] = None
        yield {**base, "choices": [choice]}
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": _usage(len(prompt_ids), len(ids))}


def _deltas(engine: FakeEngine, reply: FakeReply, ids: list[int]):
    """(first token index, delta with its tokens under ``_ids``, finish reason) for each chunk."""
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    if reply.raw_text is not None:  # exact sampled text: one chunk, the message as the non-streamed one
        yield 0, {"content": reply.content, "_ids": ids}, finish
        return
    position = 0
    if reply.reasoning:  # the think tags in the first and last reasoning chunks
        think = engine.encode_text(_think(reply.reasoning))
        yield position, {"reasoning": reply.reasoning, "_ids": think}, None
        position += len(think)
    for i in engine.encode_text(reply.content):  # one token a chunk
        yield position, {"content": engine.decode_ids([i]), "_ids": [i]}, None
        position += 1
    for index, (name, args) in enumerate(reply.tool_calls):
        call_ids = engine.encode_text(_tool_call_text(name, args))
        arguments = _arguments(args)
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


def _logprob_entry(engine: FakeEngine, token: int, position: int) -> dict:
    text = engine.decode_ids([token]) if token != IM_END else "<|im_end|>"
    return {"token": text, "logprob": logprob_at(position), "bytes": None, "top_logprobs": []}


async def _paced(engine: FakeEngine, chunks):
    """The chunks as SSE, ``token_delay_s`` apart; a client that leaves stops the generation."""
    finished = False
    try:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
            if engine.token_delay_s:
                await asyncio.sleep(engine.token_delay_s)
        yield "data: [DONE]\n\n"
        finished = True
    finally:
        if not finished:
            engine.streams_aborted += 1


async def _completions(request: Request) -> Response:
    engine: FakeEngine = request.app.state.engine
    body = json.loads(await request.body())
    await asyncio.sleep(engine.delay_s)
    if engine.record_requests:
        engine.requests.append(body)
    prompt = body["prompt"]
    prompt_ids = list(prompt) if isinstance(prompt, list) else encode(prompt)
    error = engine.check_model(body.get("model", "")) or engine.too_long(len(prompt_ids), body.get("max_tokens"))
    if error:
        return error
    reply = engine.next_reply(body)
    ids = engine.output_ids(reply)
    if body.get("stream"):
        chunks = _completion_chunks(engine, body, prompt_ids, ids)
        return StreamingResponse(_paced(engine, chunks), media_type="text/event-stream")
    logprobs = {
        "tokens": [engine.decode_ids([i]) for i in ids],
        "token_logprobs": [logprob_at(n) for n in range(len(ids))],
        "top_logprobs": _top_logprobs(engine, body, prompt_ids, len(ids)),
        "text_offset": list(range(len(ids))),
    }
    return JSONResponse(
        {
            "id": f"cmpl-{next(engine._ids)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "text": engine.decode_ids(ids),
                    "logprobs": logprobs,
                    "finish_reason": "stop",
                    "stop_reason": None,
                    "prompt_token_ids": prompt_ids,
                    "token_ids": ids,
                }
            ],
            "usage": _usage(len(prompt_ids), len(ids)),
        }
    )


def next_token(prompt_ids: list[int]) -> int:
    """The token the fake model finds likeliest after a prompt (what an adapter probe reads)."""
    return prompt_ids[-1] + 1


def _top_logprobs(engine: FakeEngine, body: dict, prompt_ids: list[int], count: int) -> list[dict]:
    """Top log-probs of each output position: with ``return_tokens_as_token_ids``, the first holds the
    fake model's ``next_token`` at ``next_logprob_at(len(prompt))``, moved by a loaded adapter."""
    top = [{} for _ in range(count)]
    if body.get("return_tokens_as_token_ids") and body.get("logprobs"):
        applied = body["model"] != engine.model and not engine.ignore_loads
        value = next_logprob_at(len(prompt_ids)) + (engine.adapter_shift if applied else 0.0)
        top[0] = {f"token_id:{next_token(prompt_ids)}": value}
    return top


def _completion_chunks(engine: FakeEngine, body: dict, prompt_ids: list[int], ids: list[int]):
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
        yield {**base, "choices": [], "usage": _usage(len(prompt_ids), len(ids))}


async def _tokenize(request: Request) -> Response:
    engine: FakeEngine = request.app.state.engine
    body = json.loads(await request.body())
    ids = render_chat(body["messages"]) if "messages" in body else encode(body.get("prompt", ""))
    return JSONResponse({"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids, "token_strs": None})


async def _models(request: Request) -> Response:
    engine: FakeEngine = request.app.state.engine
    base = {
        "id": engine.model,
        "object": "model",
        "owned_by": "fake",
        "root": engine.model,
        "parent": None,
        "max_model_len": engine.max_model_len,
    }
    loras = [
        {
            "id": name,
            "object": "model",
            "owned_by": "fake",
            "root": path,
            "parent": engine.model,
            "max_model_len": engine.max_model_len,
        }
        for name, path in engine.adapters.items()
    ]
    return JSONResponse({"object": "list", "data": [base, *loras]})


async def _load_adapter(request: Request) -> Response:
    body = json.loads(await request.body())
    engine: FakeEngine = request.app.state.engine
    if engine.load_error is not None:
        return JSONResponse(
            {"error": {"message": engine.load_error, "type": "BadRequestError", "param": None, "code": 400}},
            status_code=400,
        )
    engine.adapters[body["lora_name"]] = body["lora_path"]
    return Response(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")


async def _unload_adapter(request: Request) -> Response:
    body = json.loads(await request.body())
    request.app.state.engine.adapters.pop(body["lora_name"], None)
    return Response(f"Success: LoRA adapter '{body['lora_name']}' removed successfully.")


async def _health(_request: Request) -> Response:
    return Response(status_code=200)


def create_fake_engine_app(engine: FakeEngine | None = None) -> Starlette:
    app = Starlette(
        routes=[
            Route("/health", _health),
            Route("/v1/models", _models),
            Route("/v1/chat/completions", _chat, methods=["POST"]),
            Route("/v1/completions", _completions, methods=["POST"]),
            Route("/tokenize", _tokenize, methods=["POST"]),
            Route("/v1/load_lora_adapter", _load_adapter, methods=["POST"]),
            Route("/v1/unload_lora_adapter", _unload_adapter, methods=["POST"]),
        ]
    )
    app.state.engine = engine or FakeEngine()
    return app


def main() -> None:
    """Serve the fake engine over HTTP: ``python -m tests.fake_engine --port 8123``."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args()
    engine = FakeEngine(max_model_len=args.max_model_len, record_requests=False)
    uvicorn.run(
        create_fake_engine_app(engine),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
    )


if __name__ == "__main__":
    main()
