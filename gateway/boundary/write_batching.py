"""A connection's writes in one turn of the event loop leave as one: a response's head and body together.

uvicorn writes a response's head and its body with two ``transport.write`` calls. On loopback (an agent's
bridge, the benchmarks) each is a system call that delivers a segment and wakes the reader, so an answer
cost two of each. Here the writes made during one turn of the loop are joined and handed to the real
transport once, at the end of that turn (``call_soon``): a JSON answer is one write, and the chunks a
stream produces in one turn are one write too. Nothing waits longer than the current turn, and
``close`` and ``write_eof`` send what is pending first.
"""

from __future__ import annotations

import asyncio


class BatchedWrites:
    """A transport whose ``write`` calls in one turn of ``loop`` reach ``transport`` as one; every other
    attribute is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        """Hand what is pending to the transport (a closed one drops it, as its own ``write`` would)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        """Send what is pending, then close the sending side (the connection guard's answered connections)."""
        self.flush()
        self._transport.write_eof()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)
