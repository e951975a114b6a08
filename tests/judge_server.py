"""A small OpenAI-compatible chat server whose answers a test scripts, for driving a judge (or a
teacher) through exact scenarios (bad JSON, timeouts, rate limits, out-of-range scores, gullible judges).

``script(body) -> Reply`` decides each answer from the request body; every request is kept in
``requests``. Runs on a real socket (uvicorn in a thread), so litellm's real HTTP client talks to it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from harnessrl.server import BackgroundServer


@dataclass(frozen=True)
class Reply:
    content: str = ""
    status: int = 200
    delay_s: float = 0.0
    prompt_tokens: int = 120
    completion_tokens: int = 30
    tool_calls: tuple[tuple[str, str], ...] = ()  # (function name, arguments JSON)


def nonce_of(body: dict) -> str:
    """The verdict id the judge was told to use (the scripted judge plays along)."""
    return re.search(r'"verdict_id" must be exactly "([0-9a-f]+)"', body["messages"][0]["content"]).group(1)


def user_text(body: dict) -> str:
    return body["messages"][-1]["content"]


class JudgeServer(BackgroundServer):
    def __init__(self, script: Callable[[dict], Reply]):
        self.script, self.requests = script, []
        app = FastAPI()
        app.add_api_route("/v1/chat/completions", self._chat, methods=["POST"])
        super().__init__(app)

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        reply = self.script(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            return JSONResponse(
                {"error": {"message": reply.content or "scripted error", "type": "scripted", "code": reply.status}},
                status_code=reply.status,
            )
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "judge"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                        "message": {
                            "role": "assistant",
                            "content": reply.content,
                            "tool_calls": [
                                {"id": f"call-{n}", "type": "function", "function": {"name": name, "arguments": args}}
                                for n, (name, args) in enumerate(reply.tool_calls)
                            ]
                            or None,
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                },
            }
        )
