"""What one sandbox may send out of its bridge: its own rollout's model endpoints, nothing else.

A `Route` holds one sandbox's rollout prefix, token, the Host names its agent's clients send and the
gateway behind them; `refusal` says why a parsed request may not pass (another path or token, `..` or
percent-encoded tricks, absolute-form targets, CONNECT, Upgrade, a bad Host), and `upstream_headers`
re-frames an allowed one for the gateway with the sandbox's own token (sandboxes/bridge.py forwards it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from sandboxes.protocol import SandboxError
from sandboxes.urls import gateway_target

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
