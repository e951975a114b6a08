"""The host end of a sandbox's only route out: HTTP-aware, for one rollout's model endpoints.

    agent --> 127.0.0.1:PORT (inside, forwarder.py copies bytes) --> gateway.sock --> HostBridge --> gateway

Everything the agent sends arrives here, on the host, where it cannot reach: each request is parsed
(h11) and checked against the sandbox's `Route` (sandboxes/route.py) before a byte goes on to the gateway. Forwarded are
only `METHOD <prefix>/r/<this sandbox's token>/v1/<model endpoint>[?query]` requests in origin form
with the Host header the agent's clients send; anything else (another path or token, `..` or
percent-encoded tricks, absolute-form targets, CONNECT, Upgrade, a bad Host, a malformed request)
gets a 403 in OpenAI's error shape and the connection is closed, so nothing pipelined after a refused
request is ever looked at. Requests are re-framed (Content-Length or chunked, never both), hop-by-hop
and proxy headers are dropped, Host is the gateway's and the credentials are the sandbox's own token.
Responses stream back event by event (SSE included); connections stay alive across requests.

One agent must not starve the others (they share this process's event loop and file descriptors), so
each bridge caps its sandbox's open connections and in-flight requests (over a cap: 429 with
Retry-After on that agent's own connection, then it closes) and bounds how long the agent's *request*
side may take: the head, the body (per read and in all) and the idle gap between keep-alive requests
(408 where an answer is still possible, else the connection closes). A response streaming back from the
gateway is never timed out: a long generation is the normal case. Refusing costs CPU too, so a bridge
that has refused too often lately stops accepting for a while (its own accept loop) and leaves that
agent's further connections waiting in the kernel's backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket

import h11

from sandboxes.bridge_limits import (
    ACCEPT_BACKLOG,
    ACCEPT_RETRY_S,
    RETRY_AFTER_S,
    BridgeLimits,
    Load,
    RequestTimeout,
)
from sandboxes.h11_peer import CHUNK, Peer, ReadTimedOut
from sandboxes.route import Route, response_headers

FORBIDDEN = ("permission_error", "sandbox_route_forbidden")
BUSY = ("rate_limit_error", "sandbox_bridge_busy")  # 429: SDKs retry it, honouring Retry-After
TIMED_OUT = ("timeout_error", "sandbox_request_timeout")  # 408: SDKs retry it too


def error_body(message: str, kind: tuple[str, str] = FORBIDDEN) -> bytes:
    """OpenAI's error shape, which every dialect's client reads well enough to show the message."""
    error_type, code = kind
    return json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": code}}).encode()


class BridgeConnection:
    """One agent connection: request by request, checked, forwarded, answered."""

    def __init__(
        self,
        route: Route,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: BridgeLimits | None = None,
        load: Load | None = None,
    ) -> None:
        self.route = route
        self.limits = limits or BridgeLimits()
        self.load = load or Load()
        self.client = Peer(h11.SERVER, reader, writer)
        self.upstream: Peer | None = None

    async def serve(self) -> None:
        try:
            first = True
            while await self._one_request(first):
                self.client.conn.start_next_cycle()
                first = False
        except h11.RemoteProtocolError as exc:
            await self._answer(403, f"malformed HTTP request refused: {exc}")
        except RequestTimeout as exc:
            await self._answer(408, str(exc), TIMED_OUT)
        except (ConnectionError, OSError, h11.LocalProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            await self._close()

    async def refuse(self, message: str) -> None:
        """A 429 for a connection over the sandbox's cap; its head is read first (briefly) so that the
        agent's client sees an answer to its request rather than a connection cut mid-write."""
        try:
            if self.load.refusing < self.limits.max_connections:  # else answer at once: fds are the point
                await self._skim_head()
            await self._answer(429, message, BUSY)
        finally:
            await self._close()

    async def _skim_head(self) -> None:
        self.load.refusing += 1
        deadline = asyncio.get_running_loop().time() + self.limits.over_cap_wait_s
        try:
            with contextlib.suppress(ReadTimedOut, h11.RemoteProtocolError, ConnectionError, OSError):
                await self.client.next_event(deadline=deadline)
        finally:
            self.load.refusing -= 1

    async def _close(self) -> None:
        for peer in (self.client, self.upstream):
            if peer is not None:
                await peer.close()

    async def _one_request(self, first: bool) -> bool:
        """Handle one request; whether the connection may carry another."""
        request = await self._request_head(first)
        if type(request) is not h11.Request:
            return False  # the client closed the connection, or it sat idle too long
        reason = self.route.refusal(request)
        if reason is not None:
            await self._answer(403, f"refused by the sandbox's gateway route: {reason}")
            return False
        if self.load.in_flight >= self.limits.max_in_flight:
            await self._answer(
                429, f"too many requests in flight from this sandbox (at most {self.limits.max_in_flight})", BUSY
            )
            return False
        self.load.in_flight += 1
        try:
            return await self._forward(request)
        finally:
            self.load.in_flight -= 1

    async def _request_head(self, first: bool):
        """The next request's head, within the header timeout; None after an idle keep-alive gap."""
        loop = asyncio.get_running_loop()
        if not first and not self.client.buffered():  # idle between requests: wait for a first byte
            try:
                data = await asyncio.wait_for(self.client.reader.read(CHUNK), self.limits.idle_timeout_s)
            except TimeoutError:
                return None
            self.client.conn.receive_data(data)
        try:
            return await self.client.next_event(deadline=loop.time() + self.limits.header_timeout_s)
        except ReadTimedOut:
            raise RequestTimeout(
                f"the request line and headers did not arrive within {self.limits.header_timeout_s:g} s"
            ) from None

    async def _forward(self, request: h11.Request) -> bool:
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

    async def _upstream(self) -> Peer:
        if self.upstream is None:
            host, port = self.route.upstream
            self.upstream = Peer(h11.CLIENT, *await asyncio.open_connection(host, port))
        return self.upstream

    async def _exchange(self, upstream: Peer) -> None:
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

    async def _pump_body(self, upstream: Peer) -> None:
        limits = self.limits
        deadline = asyncio.get_running_loop().time() + limits.body_timeout_s
        while True:
            try:
                event = await self.client.next_event(limits.body_read_timeout_s, deadline)
            except ReadTimedOut as exc:
                raise RequestTimeout(
                    f"the request body did not arrive within {limits.body_timeout_s:g} s"
                    if exc.overall
                    else f"the request body stalled: no byte for {limits.body_read_timeout_s:g} s"
                ) from None
            if type(event) is h11.Data:
                await upstream.send(h11.Data(data=event.data))
            elif type(event) is h11.EndOfMessage:
                await upstream.send(h11.EndOfMessage())  # trailers are not forwarded
                return
            else:
                raise ConnectionError("the client went away mid-request")

    async def _relay_response(self, upstream: Peer) -> None:
        while True:  # no timeout: a response streams for as long as the model generates
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

    async def _answer(self, status: int, message: str, kind: tuple[str, str] = FORBIDDEN) -> None:
        """A JSON error from the bridge itself, then the connection ends."""
        if self.client.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        self.load.refused()
        body = error_body(message, kind)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        if kind is BUSY:
            headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
        with contextlib.suppress(ConnectionError, OSError, h11.LocalProtocolError):
            await self.client.send(h11.Response(status_code=status, headers=headers))
            await self.client.send(h11.Data(data=body))
            await self.client.send(h11.EndOfMessage())


class HostBridge:
    """The host end for one sandbox: a unix socket served in the caller's event loop until `close()`."""

    def __init__(self, socket_path: str, route: Route, limits: BridgeLimits | None = None) -> None:
        self.socket_path, self.route = socket_path, route
        self.limits = limits or BridgeLimits()
        self.load = Load(self.limits.refusals_per_s)  # this sandbox's alone: a neighbour's flood never counts
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> HostBridge:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.socket_path)
        os.chmod(self.socket_path, 0o666)  # the sandbox's user may not be ours
        listener.listen(ACCEPT_BACKLOG)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.ensure_future(self._accept_loop(listener))
        return self

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Our own accept loop (not asyncio's server), so that a bridge can stop accepting for a while."""
        loop = asyncio.get_running_loop()
        while True:
            if (wait_s := self.load.refusals_wait_s()) > 0:
                await asyncio.sleep(wait_s)
                continue
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError:  # EMFILE and kin: descriptors free up as connections end
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            task = asyncio.ensure_future(self._connection(sock))
            self._connections.add(task)
            task.add_done_callback(self._connection_done)

    def _connection_done(self, task: asyncio.Task) -> None:
        self._connections.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug: reported as asyncio's server does
            task.get_loop().call_exception_handler(
                {"message": "sandbox bridge connection failed", "exception": task.exception(), "task": task}
            )

    async def _connection(self, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except OSError:
            sock.close()
            return
        connection = BridgeConnection(self.route, reader, writer, self.limits, self.load)
        if self.load.connections >= self.limits.max_connections:
            await connection.refuse(
                f"too many connections from this sandbox (at most {self.limits.max_connections}); "
                "reuse a kept-alive connection"
            )
            return
        self.load.connections += 1
        try:
            await connection.serve()
        finally:
            self.load.connections -= 1

    async def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
            self._accepting = None  # open connections end with their sandbox's processes (or time out)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
