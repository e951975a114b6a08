"""BodyLimit (gateway/boundary/body_limit.py): a body over the limit is refused while it streams in, in
the dialect of its path, and never reaches the app whole; a body under it arrives untouched."""

from __future__ import annotations

import json

import pytest

from gateway.boundary import BodyLimit

CHUNK = 64 * 1024


class ReadsEverything:
    """An ASGI app that reads the whole body, counting what reaches it."""

    def __init__(self):
        self.received = 0

    async def __call__(self, scope, receive, send):
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise RuntimeError("client disconnected")  # as Starlette's request.body() does
            self.received += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def stream_through(limit: int, path: str, total: int, headers=()) -> tuple[ReadsEverything, int, list]:
    app = ReadsEverything()
    pulled = 0

    async def receive():
        nonlocal pulled
        pulled += CHUNK
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": pulled < total}

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"x-admin-key", b"k"), *headers]}
    await BodyLimit(app, max_bytes=limit)(scope, receive, send)
    return app, pulled, sent


@pytest.mark.parametrize(
    "path, shape_key", [("/v1/chat/completions", "error"), ("/v1/messages", "type"), ("/api/rollouts", "error")]
)
async def test_chunked_body_over_the_limit_is_cut_off_while_it_streams_in(path, shape_key):
    limit = 1024 * 1024
    app, pulled, sent = await stream_through(limit, path, total=96 * 1024 * 1024)
    assert app.received <= limit  # the chunk that crossed the limit never reached the app
    assert pulled <= limit + CHUNK  # nor was the rest of the 96 MiB read
    assert sent[0]["status"] == 413
    assert shape_key in json.loads(sent[1]["body"])


async def test_declared_length_over_the_limit_is_413_before_the_app_runs():
    app, pulled, sent = await stream_through(
        1000, "/v1/chat/completions", total=CHUNK, headers=[(b"content-length", str(96 * 2**20).encode())]
    )
    assert (app.received, pulled, sent[0]["status"]) == (0, 0, 413)


async def test_body_under_the_limit_reaches_the_app_whole():
    app, _, sent = await stream_through(10 * CHUNK, "/v1/chat/completions", total=4 * CHUNK)
    assert (app.received, sent[0]["status"]) == (4 * CHUNK, 200)
