"""A request's head must arrive within header_timeout_s on every connection of a served gateway (slowloris)."""

from __future__ import annotations

import socket

import httpx

from harnessrl.server import BackgroundGateway
from tests.builders import gateway_settings
from tests.held_calls import post_head, raw_exchange
from tests.http_calls import TIMEOUT_S


def test_a_head_that_never_ends_gets_408_and_the_connection_closes(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, header_timeout_s=0.3)
    with BackgroundGateway(settings) as served:
        half_head = post_head("/r/hrl-remote/v1/chat/completions", declared=10).rsplit("\r\n", 2)[0]
        status, headers, _ = raw_exchange(served.url, half_head, b"")  # no blank line, ever
    assert (status, headers["connection"]) == (408, "close")


def test_a_connection_that_sends_nothing_is_closed_with_408(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, header_timeout_s=0.3)
    with BackgroundGateway(settings) as served:
        status, _, _ = raw_exchange(served.url, "", b"")
    assert status == 408


def test_a_slow_head_on_a_kept_alive_connection_is_timed_too_and_whole_heads_pass(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, header_timeout_s=0.3)
    with BackgroundGateway(settings) as served:
        url = httpx.URL(served.url)
        with socket.create_connection((url.host, url.port), timeout=TIMEOUT_S) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # a whole head: answered
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the next one never ends
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
    assert received.startswith(b"HTTP/1.1 408")
