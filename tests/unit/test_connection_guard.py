"""Every connection of a served gateway: its requests' heads within header_timeout_s (slowloris), and at most
token_max_connections per rollout token (a bridge's caps, for sandboxes that reach it at its public URL)."""

from __future__ import annotations

import json
import socket
import time

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


def open_connection(url: str, path: str) -> socket.socket:
    """A kept-alive connection that has made one request naming a token (answered, read in full)."""
    parsed = httpx.URL(url)
    sock = socket.create_connection((parsed.host, parsed.port), timeout=TIMEOUT_S)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(65536)
    return sock


def test_a_token_holding_its_cap_of_connections_gets_429_for_one_more_while_another_token_connects(
    sqlite_db, fake_engine_server
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, token_max_connections=3)
    with BackgroundGateway(settings) as served:
        held = [open_connection(served.url, "/r/hrl-flood/v1/models") for _ in range(3)]
        try:
            status, headers, body = raw_exchange(
                served.url, "GET /r/hrl-flood/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b""
            )
            assert (status, headers["retry-after"], headers["connection"]) == (429, "1", "close")
            assert json.loads(body)["error"]["code"] == "too_many_connections"
            with httpx.Client(base_url=served.url, timeout=TIMEOUT_S) as other:  # a sibling's connection
                assert other.get("/r/hrl-sibling/v1/models").status_code != 429
            assert served_connections(served)["hrl-flood"] == 3  # the refused one never counted
        finally:
            for sock in held:
                sock.close()
        while served_connections(served).get("hrl-flood"):  # the closes reach the server: the count goes
            time.sleep(0.02)
        status, _, _ = raw_exchange(
            served.url, "GET /r/hrl-flood/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", b""
        )
    assert status != 429


def get_head(path: str, extra: str = "") -> str:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n"


def served_connections(served: BackgroundGateway) -> dict[str, int]:
    return served._server.config.http_protocol_class.connections
