"""Whether a recorded call's response reached its client; calls that did not are tagged ``undelivered``.

A call is committed before its response is sent (a delivered answer is never lost), so a client that
went away meanwhile leaves a call the agent never saw. ``Delivery`` wraps the route's response: it
checks for a disconnect right before sending, notices one while a stream is being sent (``EventStream``
listens for it) and a send that fails, and then tags the call. Tagged calls are
left out of training samples (``store.samples``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.engine.client import encoded
from store.samples import UNDELIVERED

logger = logging.getLogger(__name__)

__all__ = ["UNDELIVERED", "Delivery", "EventStream", "JSONBody", "client_gone"]


class JSONBody(Response):
    """A JSON response encoded with orjson (a model call's answer is the hot path's largest encode)."""

    media_type = "application/json"

    def render(self, content) -> bytes:
        return encoded(content)


class EventStream(Response):
    """Server-Sent Events sent as the iterator yields them; a client that leaves cancels the iteration
    (its generators' ``finally`` blocks close the engine stream, so the engine stops sampling).

    Starlette's StreamingResponse watches for the disconnect with an anyio task group per response (on
    ASGI spec 2.3, which uvicorn speaks); one plain asyncio task does the same for a fraction of the
    CPU, which a streamed call pays on the hot path.
    """

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes | str], headers: Mapping[str, str] | None = None):
        self.body_iterator, self.status_code, self.background = events, 200, None
        # Every event went out (the last send returned): delivered, even if the client hangs up before
        # the empty end-of-body message.
        self.sent_whole = False
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.current_task()
        watching, gone = True, False

        async def watch() -> None:
            nonlocal gone
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # a receive that fails: the stream's own sends say so, if anything
                return
            if watching:  # never once the last event is out: the task has moved on
                gone = True
                streaming.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                body = chunk if isinstance(chunk, bytes) else chunk.encode()  # some dialects' events are str
                await send({"type": "http.response.body", "body": body, "more_body": True})
            watching, self.sent_whole = False, True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            streaming.uncancel()
            raise ClientDisconnect() from None
        finally:
            watching = False
            watcher.cancel()


def client_gone(receive: Receive) -> bool:
    """A disconnect already waiting, without blocking (as ``Request.is_disconnected``).

    ``receive`` is stepped once by hand: a message already there completes it at once; otherwise it
    waits, and is closed unfinished (its ``finally`` blocks drop the wait). A cancelled anyio scope
    does the same for ~20 times the CPU, on every call's hot path.
    """
    pending = receive()
    try:
        pending.send(None)
    except StopIteration as done:
        return done.value.get("type") == "http.disconnect"
    pending.close()
    return False


class Delivery(Response):
    """``response``, and ``on_undelivered`` run when it did not fully reach the client."""

    def __init__(self, response: Response, on_undelivered: Callable[[], Awaitable[None]]):
        # A Response (FastAPI sends Response objects as they are) that delegates to the wrapped one.
        self.response, self.on_undelivered = response, on_undelivered
        self.status_code, self.background = response.status_code, None

    @property
    def headers(self):
        return self.response.headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected, complete = False, False

        async def watched_receive() -> Message:
            nonlocal disconnected
            message = await receive()
            disconnected = disconnected or (message["type"] == "http.disconnect" and not complete)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal complete
            if disconnected:
                raise ClientDisconnect()  # servers drop sends after a disconnect without a word
            await send(message)
            complete = complete or (message["type"] == "http.response.body" and not message.get("more_body"))

        try:
            if client_gone(receive):
                disconnected = True
                return
            await self.response(scope, watched_receive, watched_send)
        except (ClientDisconnect, OSError):
            disconnected = True
        finally:
            if not getattr(self.response, "sent_whole", False) and (disconnected or not complete):
                await self._undelivered()
        if self.background is not None:
            await self.background()

    async def _undelivered(self) -> None:
        try:
            await self.on_undelivered()
        except Exception:  # the client is gone either way; the call stays recorded untagged
            logger.exception("tagging an undelivered call failed")
