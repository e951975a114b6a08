"""Calling one ASGI middleware directly: a scope, what the app behind it saw, and what it sent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Recorded:
    sent: list[dict] = field(default_factory=list)
    reached: bool = False  # the app behind the middleware ran

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)

    @property
    def body(self) -> dict:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"))


def http_scope(path: str, headers: dict[str, str] | None = None, method: str = "POST") -> dict:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return {"type": "http", "method": method, "path": path, "headers": raw, "query_string": b""}


def ok_app(recorded: Recorded, then=None):
    """An app that notes it ran, runs ``then()`` (which may raise), and answers 200 {}."""

    async def app(scope, receive, send):
        recorded.reached = True
        if then is not None:
            then()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def call(middleware, scope: dict, recorded: Recorded) -> Recorded:
    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        recorded.sent.append(message)

    await middleware(scope, receive, send)
    return recorded
