"""A connection's writes in one turn of the event loop reach its transport as one write, in order."""

from __future__ import annotations

import asyncio

from gateway.boundary.write_batching import BatchedWrites


class RecordingTransport:
    """A transport that keeps what each ``write`` handed it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.ended = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write_eof(self) -> None:
        self.ended = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None


async def next_turn() -> None:
    await asyncio.sleep(0)


async def test_a_head_and_body_written_in_one_turn_leave_as_one_write():
    transport = RecordingTransport()
    batched = BatchedWrites(transport, asyncio.get_running_loop())
    batched.write(b"HTTP/1.1 200 OK\r\n\r\n")
    batched.write(b"")
    batched.write(b'{"ok":true}')
    assert transport.writes == []  # nothing before the turn ends
    await next_turn()
    assert transport.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"ok":true}']
    batched.write(b"data: 1\n\n")
    await next_turn()
    assert transport.writes[1:] == [b"data: 1\n\n"]  # a later turn's write is a write of its own


async def test_close_sends_what_is_pending_first_and_a_closed_transport_gets_nothing():
    transport = RecordingTransport()
    batched = BatchedWrites(transport, asyncio.get_running_loop())
    batched.write(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    batched.close()
    assert transport.writes == [b"HTTP/1.1 408 Request Timeout\r\n\r\n"] and transport.closed
    batched.write(b"late")
    await next_turn()
    assert transport.writes == [b"HTTP/1.1 408 Request Timeout\r\n\r\n"]


async def test_write_eof_sends_what_is_pending_before_the_end_of_the_sending_side():
    transport = RecordingTransport()
    batched = BatchedWrites(transport, asyncio.get_running_loop())
    batched.write(b"HTTP/1.1 404 Not Found\r\n\r\n")
    assert not transport.writes
    batched.write_eof()
    assert transport.writes == [b"HTTP/1.1 404 Not Found\r\n\r\n"] and transport.ended and not transport.closed


async def test_every_other_attribute_is_the_transports():
    transport = RecordingTransport()
    batched = BatchedWrites(transport, asyncio.get_running_loop())
    assert batched.get_extra_info("peername") == ("127.0.0.1", 1) and not batched.is_closing()
