"""Teacher runs: the same harness and tasks served by an external model, recorded by the gateway.

``TeacherEngine`` is an engine for the gateway (``engine`` capture mode) in front of any litellm model
(``openai/...``, ``anthropic/...``, ``hosted_vllm/NAME`` at another vLLM). It answers chat calls as vLLM
does, with the recording fields the gateway requires: the prompt rendered with the *policy's* chat
template and tokenizer (``prompt_token_ids``), and the teacher's answer (text and tool calls) rendered
as the policy would have written it (``token_ids``), so the trajectories are the policy's to imitate.
A teacher samples no log-probs of the policy: its gateway records each call with its ``source``
("teacher", or "demonstration" for the tasks' solutions) and no sampler log-probs (null), and every
rollout of a teacher run carries ``meta.teacher``; the learner quarantines such groups instead of
training GRPO on them (``learner.groups``), while ``harnessrl sft`` trains on them.

What answers is a ``Teacher``: ``LitellmTeacher`` (the model string through litellm) by default, or
``harnessrl.teachers.demonstrations.SolutionTeacher`` (the tasks' own solutions as the agent's tool calls).
``teacher_gateway`` starts the engine and a gateway on the same store, so a teacher run appears beside
the policy's runs in ``ls``, the viewer, ``report`` and ``eval`` summaries.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from gateway.recording.capture_probe import PROBE_USER
from harnessrl.config.serve import ServeConfig, ServeEngineConfig, Started, gateway_settings
from harnessrl.server import BackgroundGateway, BackgroundServer
from harnessrl.teachers.demonstrations import SOLUTIONS

SERVED = "base"  # the name the gateway's policy maps to when no adapter is published


@dataclass(frozen=True)
class TeacherSettings:
    model: str  # litellm model string
    tokenizer_dir: Path  # the policy's model folder: its tokenizer and chat template
    api_base: str | None = None
    max_model_len: int = 32768
    max_tokens: int = 4096  # cap on what one call may ask for
    timeout_s: float = 600.0


class Teacher(Protocol):
    """What serves a teacher run: an answer (an assistant message, maybe with tool calls) to a chat body."""

    async def answer(self, body: dict) -> dict: ...


class PolicyRendering:
    """Chat -> the policy's token ids, and an answer -> the ids the policy would have sampled."""

    def __init__(self, tokenizer_dir: Path):
        from gateway.model_tokenizer import model_tokenizer

        self.tokenizer = model_tokenizer(tokenizer_dir)
        self.end = self.tokenizer.eos_token or "<|im_end|>"

    def ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt(self, messages: list[dict], tools: list | None) -> str:
        return self.tokenizer.apply_chat_template(
            _plain(messages), tools=tools or None, add_generation_prompt=True, tokenize=False
        )

    def answer(self, messages: list[dict], tools: list | None, answer: dict, prompt: str) -> str:
        """The text the policy samples for ``answer``: the template's rendering of it after the prompt,
        through its end-of-turn token."""
        full = self.tokenizer.apply_chat_template(_plain([*messages, answer]), tools=tools or None, tokenize=False)
        text = full[len(prompt) :] if full.startswith(prompt) else (answer.get("content") or "") + self.end
        cut = text.find(self.end)
        return text[: cut + len(self.end)] if cut >= 0 else text + self.end


def _plain(messages: list[dict]) -> list[dict]:
    """Messages as chat templates expect them: text content, tool-call arguments as objects."""
    plain = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _arguments(c["function"])}} for c in m["tool_calls"]
            ]
        plain.append(m)
    return plain


def _arguments(function: dict):
    arguments = function.get("arguments")
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments or {}
    except ValueError:
        return arguments


class LitellmTeacher:
    """Answers as an external model does, through litellm."""

    def __init__(self, settings: TeacherSettings):
        self.settings = settings

    async def answer(self, body: dict) -> dict:
        from harnesses.grading.judge import litellm_module

        litellm = litellm_module()
        s = self.settings
        kwargs = {
            "model": s.model,
            "messages": body["messages"],
            "timeout": s.timeout_s,
            "drop_params": True,
            "max_tokens": min(int(body.get("max_tokens") or s.max_tokens), s.max_tokens),
        }
        for name in ("tools", "tool_choice", "temperature", "top_p", "stop"):
            if body.get(name) is not None:
                kwargs[name] = body[name]
        if s.api_base:
            kwargs["api_base"] = s.api_base
        message = (await litellm.acompletion(**kwargs)).choices[0].message
        answer = {"role": "assistant", "content": message.content or ""}
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments or "{}"},
            }
            for c in message.tool_calls or []
        ]
        if calls:
            answer["tool_calls"] = calls
        return answer


class TeacherEngine(BackgroundServer):
    def __init__(self, settings: TeacherSettings, teacher: Teacher | None = None):
        self.settings, self.rendering, self.calls = settings, PolicyRendering(settings.tokenizer_dir), 0
        self.teacher = teacher or LitellmTeacher(settings)
        self.adapters: dict[str, str] = {}
        app = FastAPI()
        app.add_api_route("/health", lambda: JSONResponse({}), methods=["GET"])
        app.add_api_route("/v1/models", self._models, methods=["GET"])
        app.add_api_route("/v1/chat/completions", self._chat, methods=["POST"])
        app.add_api_route("/v1/load_lora_adapter", self._load, methods=["POST"])
        app.add_api_route("/v1/unload_lora_adapter", self._unload, methods=["POST"])
        super().__init__(app)

    async def _models(self) -> JSONResponse:
        root = str(self.settings.tokenizer_dir)
        data = [
            {
                "id": SERVED,
                "object": "model",
                "root": root,
                "parent": None,
                "max_model_len": self.settings.max_model_len,
            }
        ]
        data += [
            {"id": name, "object": "model", "root": path, "parent": SERVED} for name, path in self.adapters.items()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _load(self, request: Request) -> JSONResponse:  # policy versions mean nothing to a teacher
        body = await request.json()
        self.adapters[body["lora_name"]] = body.get("lora_path", "")
        return JSONResponse({})

    async def _unload(self, request: Request) -> JSONResponse:
        self.adapters.pop((await request.json()).get("lora_name"), None)
        return JSONResponse({})

    async def _chat(self, request: Request):
        body = await request.json()
        messages, tools = body.get("messages") or [], body.get("tools")
        try:
            answer = {"role": "assistant", "content": "OK"} if body.get("user") == PROBE_USER else await self._ask(body)
        except Exception as exc:  # noqa: BLE001 - the teacher's error, as an engine error the gateway maps
            status = getattr(exc, "status_code", 502)
            return JSONResponse(
                {
                    "error": {
                        "message": f"teacher {self.settings.model}: {exc}",
                        "type": type(exc).__name__,
                        "code": status,
                    }
                },
                status_code=status if 400 <= status < 600 else 502,
            )
        prompt = self.rendering.prompt(messages, tools)
        prompt_ids = self.rendering.ids(prompt)
        ids = self.rendering.ids(self.rendering.answer(messages, tools, answer, prompt))
        reply = _reply(body, answer, prompt_ids, ids)
        if body.get("stream"):
            return StreamingResponse(_stream(body, reply), media_type="text/event-stream")
        return JSONResponse(reply)

    async def _ask(self, body: dict) -> dict:
        self.calls += 1
        return await self.teacher.answer(body)


def _reply(body: dict, answer: dict, prompt_ids: list[int], ids: list[int]) -> dict:
    finish = "tool_calls" if answer.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-teacher-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", SERVED),
        "prompt_token_ids": prompt_ids,
        "choices": [
            {
                "index": 0,
                "message": {"tool_calls": [], **answer},
                "logprobs": None,  # a teacher samples no log-probs of the policy
                "finish_reason": finish,
                "stop_reason": None,
                "token_ids": ids,
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + len(ids),
        },
    }


def _stream(body: dict, reply: dict):
    """The answer as vLLM streams it: a role chunk with the prompt ids, one chunk with the whole answer."""
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = reply["choices"][0]
    delta = {"content": choice["message"].get("content") or ""}
    if choice["message"].get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(choice["message"]["tool_calls"])]
    chunks = [
        {
            **base,
            "prompt_token_ids": reply["prompt_token_ids"],
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            ],
        },
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "logprobs": choice["logprobs"],
                    "finish_reason": choice["finish_reason"],
                    "stop_reason": None,
                    "token_ids": choice["token_ids"],
                }
            ],
        },
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": reply["usage"]})
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


@contextmanager
def teacher_gateway(settings: TeacherSettings, database_url: str, admin_key: str, teacher: Teacher | None = None):
    """A gateway on ``database_url`` whose engine is the teacher (default: ``settings.model`` through
    litellm); yields its URL."""
    with TeacherEngine(settings, teacher) as engine:
        source = "demonstration" if settings.model == SOLUTIONS else "teacher"
        served = ServeConfig(engine=ServeEngineConfig(tokenizer=settings.tokenizer_dir))  # the policy's tokens
        started = Started(database_url, admin_key, (engine.url,), call_source=source)
        with BackgroundGateway(gateway_settings(served, started)) as gateway:
            yield gateway.url
