"""Every connection of a served gateway: its requests' heads within header_timeout_s (slowloris), and at most
token_max_connections per rollout token (a bridge's caps, for sandboxes that reach it at its public URL)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from harnessrl.server import BackgroundGateway
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.held_calls import post_head, raw_exchange
from tests.http_calls import TIMEOUT_S
from tests.raw_connections import RawConnection, get_head
from tests.waiting import wait_until


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


def served_connections(served: BackgroundGateway) -> dict[str, int]:
    return served._server.config.http_protocol_class.connections


# Answers the gateway sends before reading a body: the control plane without its key, no such route, no such method.
EARLY_ANSWERS = [("/api/rollouts", 401), ("/nothing/here", 404), ("/v1/models", 405)]


@pytest.mark.parametrize(("path", "status"), EARLY_ANSWERS, ids=[str(s) for _, s in EARLY_ANSWERS])
def test_an_answer_sent_before_its_body_was_read_ends_the_connection_however_the_body_trickles(
    sqlite_db, fake_engine_server, path, status
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, header_timeout_s=0.5)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        raw.send(post_head(path, declared=1_000_000) + "{")
        assert raw.answer()[0] == status
        assert raw.trickle_until_closed(bound_s=30.0)  # a byte every few ms: no body timer would cut it


@pytest.mark.parametrize(("path", "status"), EARLY_ANSWERS, ids=[str(s) for _, s in EARLY_ANSWERS])
def test_an_answer_sent_before_its_body_was_in_tells_the_client_not_to_reuse_the_connection(
    sqlite_db, fake_engine_server, path, status
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        raw.send(post_head(path, declared=1_000_000) + "{")  # a client's next request would race the close
        assert raw.answer()[0] == status
        assert raw.headers["connection"] == "close"
        assert raw.at_end()


def test_a_client_sending_a_large_body_to_an_early_answer_reads_the_answer_not_a_reset(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url)
    body = b"x" * (8 * 1024 * 1024)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        raw.send(post_head("/nothing/here", declared=len(body)).encode() + body)  # all of it, as a client does
        assert raw.answer()[0] == 404
        assert raw.at_end()  # the server ended its side once the answer was out


def test_a_body_read_in_full_keeps_its_connection_alive(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, header_timeout_s=0.5)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        for _ in range(2):  # the whole body sent with its head: the 401 leaves the connection for the next
            raw.send(post_head("/api/rollouts", declared=2) + "{}")
            assert raw.answer()[0] == 401
            assert "connection" not in raw.headers
        assert raw.ask(get_head("/health"))[0] == 200


def test_a_connection_opened_under_a_made_up_token_cannot_carry_a_real_one_past_its_cap(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, token_max_connections=2)
    with BackgroundGateway(settings) as served:
        held = [open_connection(served.url, "/r/hrl-real/v1/models") for _ in range(2)]
        try:
            for carried in (
                get_head("/r/hrl-real/v1/models"),
                get_head("/v1/models", "Authorization: Bearer hrl-real\r\n"),
            ):
                with RawConnection(served.url) as raw:
                    assert raw.ask(get_head("/r/hrl-made-up/v1/models"))[0] == 401
                    assert served_connections(served)["hrl-made-up"] == 1
                    status, body = raw.ask(carried)  # the real token: one more connection than its cap
                    assert (status, json.loads(body)["error"]["code"]) == (429, "too_many_connections")
                    assert raw.at_end()  # and closed
                wait_until(lambda: "hrl-made-up" not in served_connections(served), "the made-up token's count to go")
            assert served_connections(served) == {"hrl-real": 2}
        finally:
            for sock in held:
                sock.close()


def test_a_connection_counts_against_the_token_its_latest_request_names(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        raw.ask(get_head("/r/hrl-first/v1/models"))
        raw.ask(get_head("/v1/models", "x-api-key: hrl-second\r\n"))
        assert served_connections(served) == {"hrl-second": 1}
        raw.ask(get_head("/health"))
        assert served_connections(served) == {}


def test_a_percent_encoded_token_path_counts_against_the_decoded_token(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, token_max_connections=2)
    with BackgroundGateway(settings) as served:
        held = [open_connection(served.url, path) for path in ("/r/hrl-flood/v1/models", "/r/%68rl-flood/v1/models")]
        try:
            assert served_connections(served) == {"hrl-flood": 2}
            for path in ("/r/%68rl-flood/v1/models", "/r/hrl-%66lood/v1/models", "/r/hrl-flood/v1/models"):
                status, _, _ = raw_exchange(served.url, get_head(path), b"")
                assert status == 429, path
        finally:
            for sock in held:
                sock.close()


def test_a_head_over_its_size_cap_gets_431_and_others_are_served_meanwhile(sqlite_db, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url)  # the default cap: 64 KiB
    junk = "x" * (1024 * 1024)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        raw.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Junk: " + junk[: 48 * 1024])  # a head in progress
        with httpx.Client(base_url=served.url, timeout=TIMEOUT_S) as other:
            assert other.get("/health").status_code == 200  # another connection, answered meanwhile
        raw.send(junk[48 * 1024 :] + "\r\n\r\n")  # the rest of a 1 MiB header
        status, body = raw.answer()
        assert (status, json.loads(body)["error"]["code"]) == (431, "head_too_large")
        assert raw.at_end()  # and closed
        with httpx.Client(base_url=served.url, timeout=TIMEOUT_S) as other:
            assert other.get("/health", headers={"x-junk": "x" * 60_000}).status_code == 200  # under the cap: served


def test_a_head_within_its_cap_is_served_with_a_large_body_or_pipelined_heads_in_the_same_write(
    sqlite_db, fake_engine_server
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_head_bytes=1024)
    with BackgroundGateway(settings) as served, RawConnection(served.url) as raw:
        body = json.dumps({"run": "r", "task": "t", "meta": {"pad": "x" * 500_000}}).encode()
        head = post_head("/api/rollouts", declared=len(body)).replace(
            "\r\n\r\n", f"\r\nx-admin-key: {TEST_ADMIN_KEY}\r\n\r\n"
        )
        raw.send(head.encode() + body)
        assert raw.answer()[0] == 201
        raw.send(get_head("/health") * 40)  # 40 heads of ~40 bytes, each within the cap, 1.5 KiB in all
        assert [raw.answer()[0] for _ in range(40)] == [200] * 40
    with pytest.raises(ValueError, match="max_head_bytes"):
        gateway_settings(sqlite_db, fake_engine_server.url, max_head_bytes=0)
