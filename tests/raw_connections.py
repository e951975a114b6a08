"""Raw connections to a served gateway, for what the connection guard holds (gateway/boundary/connection_guard.py):
answers read one at a time off a kept-alive connection, a body trickled until the server closes, heads of any
size."""

from __future__ import annotations

import socket

import httpx

from tests.http_calls import TIMEOUT_S
from tests.waiting import wait_until

TRICKLE_S = 0.02  # between the bytes of a trickled body: far faster than any timeout a test sets


def get_head(path: str, extra: str = "") -> str:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n"


class RawConnection:
    """One connection; its answers are read through a buffer, so pipelined ones are read one by one."""

    def __init__(self, url: str):
        parsed = httpx.URL(url)
        self.sock = socket.create_connection((parsed.host, parsed.port), timeout=TIMEOUT_S)
        self._reader = self.sock.makefile("rb")

    def send(self, data: bytes | str) -> None:
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def answer(self) -> tuple[int, bytes]:
        """The next answer (a content-length body): its status and body; its headers in ``self.headers``."""
        status_line = self._reader.readline()
        assert status_line, "the connection closed before an answer"
        self.headers: dict[str, str] = {}
        while (line := self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.lower()] = value.strip()
        return int(status_line.split()[1]), self._reader.read(int(self.headers.get("content-length", 0)))

    def ask(self, head: str) -> tuple[int, bytes]:
        """Send a whole head (no body) and read its answer."""
        self.send(head)
        return self.answer()

    def at_end(self) -> bool:
        """Whether the server ended its side (what is left to read is nothing)."""
        return self._reader.read(1) == b""

    def closed_by_server(self) -> bool:
        """Send one more byte of a body: True once the server has closed the connection (the send or a read
        fails: the server reset what came after its close)."""
        try:
            self.sock.sendall(b" ")
            self.sock.setblocking(False)
            try:
                self.sock.recv(65536)  # the server's end of its side is not the close itself
            except BlockingIOError:
                pass
            finally:
                self.sock.setblocking(True)
        except OSError:  # EPIPE or ECONNRESET: the server closed
            return True
        return False

    def trickle_until_closed(self, bound_s: float) -> bool:
        """Trickle a body's bytes until the server closes the connection; fails past ``bound_s`` (a guard)."""
        return wait_until(self.closed_by_server, "the server to close the connection", bound_s, TRICKLE_S)

    def close(self) -> None:
        self._reader.close()
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
