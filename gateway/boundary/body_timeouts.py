"""A request body read under a bridge's timeouts: cut when it goes ``read_s`` without a byte or takes
more than ``total_s`` in all (``gateway.boundary.token_caps`` answers 408). The response side is never
timed: once the body is in, or the response started, receive passes straight through.

One timer per layer, not per request (on the hot path a body read that returns at once costs a dict
insert and delete): ``BodyWatch`` keeps the reads that are waiting and looks at them every quarter of the
shorter timeout while any is there, so a stalled body is cut at most a quarter of that late. A cut
read is cancelled and answers the app as if the client went away; what the app sends then is dropped.
"""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Send

DISCONNECT: Message = {"type": "http.disconnect"}


class BodyWatch:
    """The body reads waiting now, looked at on one timer that runs only while there are any."""

    def __init__(self, read_s: float, total_s: float):
        self.read_s, self.total_s = read_s, total_s
        self.tick_s = min(read_s, total_s) / 4
        self.waiting: dict[TimedBody, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, body: TimedBody, loop: asyncio.AbstractEventLoop) -> None:
        self.waiting[body] = None
        if self._timer is None or self._loop is not loop:  # a timer of a closed loop never fires
            self._loop, self._timer = loop, loop.call_later(self.tick_s, self._look)

    def _look(self) -> None:
        now = self._loop.time()
        for body in [b for b in self.waiting if now - b.since >= self.read_s or now >= b.deadline]:
            del self.waiting[body]
            body.cut("body_read_timeout_s" if now - body.since >= self.read_s else "body_timeout_s")
        self._timer = self._loop.call_later(self.tick_s, self._look) if self.waiting else None


class TimedBody:
    """One request's receive under the watch, and its send, noting whether the response started."""

    __slots__ = ("_receive", "_send", "watch", "deadline", "since", "task", "done", "started", "late")

    def __init__(self, receive: Receive, send: Send, watch: BodyWatch):
        self._receive, self._send, self.watch = receive, send, watch
        self.deadline = self.since = 0.0  # set at the first read, and at each read
        self.task: asyncio.Task | None = None
        self.done = self.started = False
        self.late: str | None = None  # the setting the body broke: body_read_timeout_s or body_timeout_s

    async def receive(self) -> Message:
        if self.done or self.started:
            return await self._receive()
        if self.late is not None:
            return DISCONNECT
        loop = asyncio.get_running_loop()
        self.since = now = loop.time()
        if not self.deadline:
            self.deadline = now + self.watch.total_s
        self.task = asyncio.current_task()
        self.watch.add(self, loop)
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if self.late is None or self.task.uncancel():
                raise  # cancelled by someone else too
            return DISCONNECT
        finally:
            self.watch.waiting.pop(self, None)
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.done = True
        return message

    def cut(self, setting: str) -> None:
        """Called by the watch: the body broke ``setting``; its waiting read ends as a disconnect."""
        self.late = setting
        self.task.cancel()

    async def send(self, message: Message) -> None:
        if self.late is not None and not self.started:
            return  # the app's reaction to the cut body; the client gets the 408 instead
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)
