"""One side of a bridge: an h11 state machine over an asyncio stream, with read timeouts and deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import math

import h11

CHUNK = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024  # request line + headers; agents send a few hundred bytes


class ReadTimedOut(Exception):
    def __init__(self, overall: bool) -> None:
        self.overall = overall  # the deadline passed (else one read waited too long)


class Peer:
    """One side of the bridge: an h11 state machine over an asyncio stream."""

    def __init__(self, role, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conn = h11.Connection(role, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.reader, self.writer = reader, writer

    async def next_event(self, read_timeout_s: float | None = None, deadline: float | None = None):
        """The next h11 event; with a read timeout or a loop-time deadline, `ReadTimedOut` past them."""
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self._read(read_timeout_s, deadline))

    async def _read(self, read_timeout_s: float | None, deadline: float | None) -> bytes:
        if read_timeout_s is None and deadline is None:
            return await self.reader.read(CHUNK)
        left = math.inf if deadline is None else deadline - asyncio.get_running_loop().time()
        per_read = math.inf if read_timeout_s is None else read_timeout_s
        try:
            return await asyncio.wait_for(self.reader.read(CHUNK), max(0.0, min(left, per_read)))
        except TimeoutError:
            raise ReadTimedOut(overall=left <= per_read) from None

    def buffered(self) -> bool:
        return bool(self.conn.trailing_data[0])

    async def send(self, event) -> None:
        data = self.conn.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    def reusable(self) -> bool:
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
