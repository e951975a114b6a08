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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.recording.capture_probe import PROBE_USER
from tests.fake_streams import chat_chunks, completion_chunks, paced
from tests.fake_tokens import (
    IM_END,
    FakeReply,
    arguments_text,
    decode,
    encode,
    logprob_at,
    next_logprob_at,
    next_token,
    render_chat,
    think_text,
    tool_call_text,
    usage,
)


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
    # When set, a stream stops after its first chunk until the test sets it (``stream_started`` says when
    # the first chunk went out): something can happen in the middle of a stream, by condition, not clock.
    stream_gate: threading.Event | None = None
    # When set, every chat call is answered with this (status, message) in vLLM's error shape.
    failure: tuple[int, str] | None = None
    stream_started: threading.Event = field(default_factory=threading.Event)
    load_error: str | None = None  # when set, loading an adapter fails with this message
    # Every loaded adapter moves each prompt log-prob by this many nats (what a probe measures);
    # ``ignore_loads``: a load answers 200 but the adapter is never applied (the base model serves it).
    adapter_shift: float = -0.5
    ignore_loads: bool = False
    # Every top log-prob is off by this many nats, the sign alternating by position: another CPU's
    # kernels, the same on the base model and under an adapter.
    numerics_noise: float = 0.0
    # The "tokenizer" of sampled text: bytes by default; tito tests plug in a real model's.
    encode_text: Callable[[str], list[int]] = encode
    decode_ids: Callable[[list[int]], str] = decode
    # A chat body's prompt ids: ChatML over bytes by default; a real model's template where a test needs
    # the ids vLLM would render (engine capture's token roles: tests/role_calls.py).
    render_prompt: Callable[[dict], list[int]] = field(default=lambda body: render_chat(body["messages"]))
    _ids: itertools.count = field(default_factory=itertools.count)

    def restart(self) -> None:
        """What an engine restart does to the gateway's view: every runtime-loaded adapter is gone."""
        self.adapters.clear()

    def failing(self) -> Response | None:
        if self.failure is None:
            return None
        status, message = self.failure
        body = {"error": {"message": message, "type": "InternalServerError", "code": status}}
        return JSONResponse(body, status_code=status)

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
            else think_text(reply.reasoning)
            + reply.content
            + "".join(tool_call_text(name, args) for name, args in reply.tool_calls)
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


def _chat_choice(engine: FakeEngine, reply: FakeReply, ids: list[int]) -> dict:
    tool_calls = [
        {
            "id": f"chatcmpl-tool-{next(engine._ids)}",
            "type": "function",
            "function": {"name": name, "arguments": arguments_text(args)},
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
    error = engine.check_model(body.get("model", "")) or engine.failing()
    prompt_ids = engine.render_prompt(body)
    error = error or engine.too_long(len(prompt_ids), body.get("max_tokens"))
    if error:
        return error
    reply = FakeReply(content="OK") if probe else engine.next_reply(body)
    ids = engine.output_ids(reply)
    if body.get("stream"):
        chunks = (_omitted(engine.omit, chunk) for chunk in chat_chunks(engine, body, reply, prompt_ids, ids))
        return StreamingResponse(paced(engine, chunks), media_type="text/event-stream")
    return JSONResponse(
        _omitted(
            engine.omit,
            {
                "id": f"chatcmpl-{next(engine._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [_chat_choice(engine, reply, ids)],
                "usage": usage(len(prompt_ids), len(ids)),
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
        chunks = completion_chunks(engine, body, prompt_ids, ids)
        return StreamingResponse(paced(engine, chunks), media_type="text/event-stream")
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
            "usage": usage(len(prompt_ids), len(ids)),
        }
    )


def _top_logprobs(engine: FakeEngine, body: dict, prompt_ids: list[int], count: int) -> list[dict]:
    """Top log-probs of each output position: with ``return_tokens_as_token_ids``, the first holds the
    fake model's ``next_token`` at ``next_logprob_at(len(prompt))``, moved by a loaded adapter."""
    top = [{} for _ in range(count)]
    if body.get("return_tokens_as_token_ids") and body.get("logprobs"):
        applied = body["model"] != engine.model and not engine.ignore_loads
        value = next_logprob_at(len(prompt_ids)) + (engine.adapter_shift if applied else 0.0)
        value += engine.numerics_noise * (1 if len(prompt_ids) % 2 else -1)
        top[0] = {f"token_id:{next_token(prompt_ids)}": value}
    return top


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
    parser.add_argument("--reply-tokens", type=int, default=None, help="tokens per answer, the end token included")
    parser.add_argument("--delay-s", type=float, default=0.0, help="seconds each answer takes (an agent's pace)")
    args = parser.parse_args()
    engine = FakeEngine(max_model_len=args.max_model_len, record_requests=False, delay_s=args.delay_s)
    if args.reply_tokens:
        text = ("Hello from the fake engine. " * args.reply_tokens)[: args.reply_tokens - 1]  # a byte a token
        engine.script = lambda _body: FakeReply(content=text)
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
