"""The host end of a sandbox's only route out: HTTP-aware, for one rollout's model endpoints.

    agent --> 127.0.0.1:PORT (inside, forwarder.py copies bytes) --> gateway.sock --> HostBridge --> gateway

Everything the agent sends arrives here, on the host, where it cannot reach: each request is parsed
(h11) and checked against the sandbox's `Route` before a byte goes on to the gateway. Forwarded are
only `METHOD <prefix>/r/<this sandbox's token>/v1/<model endpoint>[?query]` requests in origin form
with the Host header the agent's clients send; anything else (another path or token, `..` or
percent-encoded tricks, absolute-form targets, CONNECT, Upgrade, a bad Host, a malformed request)
gets a 403 in OpenAI's error shape and the connection is closed, so nothing pipelined after a refused
request is ever looked at. Requests are re-framed (Content-Length or chunked, never both), hop-by-hop
and proxy headers are dropped, Host is the gateway's and the credentials are the sandbox's own token.
Responses stream back event by event (SSE included); connections stay alive across requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from sandboxes.protocol import SandboxError
from sandboxes.urls import gateway_target

CHUNK = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024  # request line + headers; agents send a few hundred bytes
# The model endpoints of the three dialects (gateway/openai, responses, anthropic routers).
# Also the rollout's tool server (gateway/api/rollout_tools.py: MCP over HTTP, forwarded by the gateway
# to the one server the runner registered for the rollout, e.g. an OpenEnv environment's tools).
MODEL_ENDPOINTS = (
    ("POST", "chat/completions"),
    ("POST", "completions"),
    ("POST", "responses"),
    ("POST", "messages"),
    ("POST", "messages/count_tokens"),
    ("GET", "models"),
    ("POST", "tools/mcp"),
    ("GET", "tools/mcp"),
    ("DELETE", "tools/mcp"),
)
ROLLOUT_PATH = re.compile(r"(?P<prefix>(?:/[A-Za-z0-9._~-]+)*/r/(?P<token>[A-Za-z0-9_-]+)/v1)")
SAFE_QUERY = re.compile(rb"[A-Za-z0-9_.~=&-]*")  # e.g. Claude Code's ?beta=true; no %-escapes
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"expect",
}
REPLACED = {
    b"host",
    b"content-length",
    b"authorization",
    b"x-api-key",
    b"x-admin-key",
    b"forwarded",
    b"x-real-ip",
    b"http2-settings",
}
CONNECTION_OPTIONS = {b"close", b"keep-alive"}


@dataclass(frozen=True)
class Route:
    """What one sandbox may ask for, and where it goes."""

    prefix: str  # e.g. "/r/hrl-abc/v1": the path of the rollout's base URL
    token: str
    hosts: frozenset[bytes]  # Host header values the agent's clients send (lowercase)
    upstream: tuple[str, int]  # the gateway's host and port

    @classmethod
    def for_gateway(cls, gateway_url: str, port_inside: int | None = None) -> Route:
        """The route of a sandbox whose agent uses ``gateway_url`` (a rollout's base URL)."""
        host, port = gateway_target(gateway_url)
        match = ROLLOUT_PATH.fullmatch(urlsplit(gateway_url).path.rstrip("/"))
        if match is None:
            raise SandboxError(
                f"gateway URL {gateway_url!r} is not a rollout's base URL "
                "(http://HOST:PORT/r/<token>/v1, as POST /api/rollouts returns it): the "
                "sandbox's route forwards only that rollout's model endpoints"
            )
        inside = port_inside or port
        hosts = {f"127.0.0.1:{inside}", f"localhost:{inside}"}
        if inside == 80:
            hosts |= {"127.0.0.1", "localhost"}
        return cls(match["prefix"], match["token"], frozenset(h.encode() for h in hosts), (host, port))

    @property
    def upstream_host(self) -> bytes:
        host, port = self.upstream
        return f"[{host}]:{port}".encode() if ":" in host else f"{host}:{port}".encode()

    def allowed(self) -> dict[tuple[bytes, bytes], str]:
        return {(m.encode(), f"{self.prefix}/{e}".encode()): e for m, e in MODEL_ENDPOINTS}

    def refusal(self, request: h11.Request) -> str | None:
        """Why the request may not pass, or None when it may."""
        if request.method == b"CONNECT" or not request.target.startswith(b"/"):
            return "only origin-form requests (METHOD /path HTTP/1.1) to the gateway pass; no proxying"
        path, _, query = request.target.partition(b"?")
        if (request.method, path) not in self.allowed():
            endpoints = ", ".join(f"{m} {self.prefix}/{e}" for m, e in MODEL_ENDPOINTS)
            return (
                f"{request.method.decode('latin-1')} {path.decode('latin-1')[:200]!r} is not a model "
                f"endpoint of this sandbox's rollout; allowed: {endpoints}"
            )
        if not SAFE_QUERY.fullmatch(query):
            return "the query string may hold only letters, digits and _.~=&- (no %-escapes)"
        hosts = [value.lower() for name, value in request.headers if name == b"host"]
        if len(hosts) != 1 or hosts[0] not in self.hosts:
            return f"Host must be one of {sorted(h.decode() for h in self.hosts)}"
        for name, value in request.headers:
            if name in (b"upgrade", b"http2-settings"):
                return "protocol upgrades (Upgrade, h2c, websockets) are not forwarded"
            if name == b"connection" and not _tokens(value) <= CONNECTION_OPTIONS:
                return "Connection may only say close or keep-alive"
        return None

    def upstream_headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The client's end-to-end headers, with the gateway's Host, our framing and our own token."""
        kept = [
            (n, v)
            for n, v in headers
            if n not in HOP_BY_HOP and n not in REPLACED and not n.startswith(b"x-forwarded-")
        ]
        framing = [(n, v) for n, v in headers if n in (b"transfer-encoding", b"content-length")]
        chunked = any(n == b"transfer-encoding" for n, _ in framing)
        framing = [(b"transfer-encoding", b"chunked")] if chunked else framing[:1]
        token = self.token.encode()
        return [
            (b"host", self.upstream_host),
            *kept,
            *framing,
            (b"authorization", b"Bearer " + token),
            (b"x-api-key", token),
        ]


def _tokens(value: bytes) -> set[bytes]:
    return {t.strip().lower() for t in value.split(b",") if t.strip()}


def response_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The gateway's response headers minus hop-by-hop ones (h11 frames the body for the client)."""
    framing = (b"content-length", b"transfer-encoding")
    return [(n, v) for n, v in headers if n in framing or n not in HOP_BY_HOP]


def error_body(message: str) -> bytes:
    """OpenAI's error shape, which every dialect's client reads well enough to show the message."""
    return json.dumps(
        {"error": {"message": message, "type": "permission_error", "param": None, "code": "sandbox_route_forbidden"}}
    ).encode()


class _Peer:
    """One side of the bridge: an h11 state machine over an asyncio stream."""

    def __init__(self, role, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conn = h11.Connection(role, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.reader, self.writer = reader, writer

    async def next_event(self):
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self.reader.read(CHUNK))

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


class BridgeConnection:
    """One agent connection: request by request, checked, forwarded, answered."""

    def __init__(self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.route = route
        self.client = _Peer(h11.SERVER, reader, writer)
        self.upstream: _Peer | None = None

    async def serve(self) -> None:
        try:
            while await self._one_request():
                self.client.conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            await self._answer(403, f"malformed HTTP request refused: {exc}")
        except (ConnectionError, OSError, h11.LocalProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            for peer in (self.client, self.upstream):
                if peer is not None:
                    await peer.close()

    async def _one_request(self) -> bool:
        """Handle one request; whether the connection may carry another."""
        request = await self.client.next_event()
        if type(request) is not h11.Request:
            return False  # the client closed the connection
        reason = self.route.refusal(request)
        if reason is not None:
            await self._answer(403, f"refused by the sandbox's gateway route: {reason}")
            return False
        try:
            upstream = await self._upstream()
        except OSError as exc:
            await self._answer(502, f"the gateway is not reachable from the sandbox bridge: {exc}")
            return False
        await upstream.send(
            h11.Request(
                method=request.method, target=request.target, headers=self.route.upstream_headers(request.headers)
            )
        )
        if self.client.conn.they_are_waiting_for_100_continue:
            await self.client.send(h11.InformationalResponse(status_code=100, headers=[]))
        await self._exchange(upstream)
        if upstream.reusable():
            upstream.conn.start_next_cycle()
        else:
            await upstream.close()
            self.upstream = None
        return self.client.reusable()

    async def _upstream(self) -> _Peer:
        if self.upstream is None:
            host, port = self.route.upstream
            self.upstream = _Peer(h11.CLIENT, *await asyncio.open_connection(host, port))
        return self.upstream

    async def _exchange(self, upstream: _Peer) -> None:
        """The request body up and the response down, at once: the gateway may answer early (413)."""
        body = asyncio.ensure_future(self._pump_body(upstream))
        relay = asyncio.ensure_future(self._relay_response(upstream))
        try:
            await asyncio.wait({body, relay}, return_when=asyncio.FIRST_EXCEPTION)
            if not relay.done():  # the request body failed: no answer will come for it
                body.result()
            relay.result()
        finally:
            for task in (body, relay):
                task.cancel()
            await asyncio.gather(body, relay, return_exceptions=True)

    async def _pump_body(self, upstream: _Peer) -> None:
        while True:
            event = await self.client.next_event()
            if type(event) is h11.Data:
                await upstream.send(h11.Data(data=event.data))
            elif type(event) is h11.EndOfMessage:
                await upstream.send(h11.EndOfMessage())  # trailers are not forwarded
                return
            else:
                raise ConnectionError("the client went away mid-request")

    async def _relay_response(self, upstream: _Peer) -> None:
        while True:
            event = await upstream.next_event()
            if type(event) is h11.InformationalResponse:
                continue  # 100 Continue was ours to give; other 1xx mean nothing to a model client
            if type(event) is h11.Response:
                await self.client.send(
                    h11.Response(
                        status_code=event.status_code, reason=event.reason, headers=response_headers(event.headers)
                    )
                )
            elif type(event) is h11.Data:
                await self.client.send(h11.Data(data=event.data))
            elif type(event) is h11.EndOfMessage:
                await self.client.send(h11.EndOfMessage())
                return
            else:  # the gateway closed before the end of its response
                if self.client.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._answer(502, "the gateway closed the connection without an answer")
                raise ConnectionError("the gateway closed the connection mid-response")

    async def _answer(self, status: int, message: str) -> None:
        """A JSON error from the bridge itself, then the connection ends."""
        if self.client.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = error_body(message)
        with contextlib.suppress(ConnectionError, OSError, h11.LocalProtocolError):
            await self.client.send(
                h11.Response(
                    status_code=status,
                    headers=[
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                )
            )
            await self.client.send(h11.Data(data=body))
            await self.client.send(h11.EndOfMessage())


class HostBridge:
    """The host end for one sandbox: a unix socket served in the caller's event loop until `close()`."""

    def __init__(self, socket_path: str, route: Route) -> None:
        self.socket_path, self.route = socket_path, route
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> HostBridge:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._server = await asyncio.start_unix_server(
            lambda r, w: BridgeConnection(self.route, r, w).serve(), self.socket_path
        )
        os.chmod(self.socket_path, 0o666)  # the sandbox's user may not be ours
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None  # open connections end with their sandbox's processes
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
