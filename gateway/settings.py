"""Gateway settings. The composition root builds them in one place, from `harnessrl serve`'s config
(harnessrl/config/serve.py, whose keys take the defaults written here); tests build them directly."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from store.records import CALL_SOURCES

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class GatewaySettings:
    database_url: str  # sqlite+aiosqlite:///... or postgresql+asyncpg://...
    # The control plane's key: every /api route (reads and writes) and /admin need it, as x-admin-key
    # or Authorization: Bearer. The runner, the learner and the viewer hold it; agents in sandboxes
    # hold only their rollout's token. Required: no code path serves the control plane without it.
    admin_key: str
    engine_url: str = "http://127.0.0.1:8100"  # vLLM's OpenAI server
    # Several engines behind this gateway (gateway.engine.pool); empty: the one engine_url.
    engine_urls: tuple[str, ...] = ()
    engine_max_in_flight: int = 256  # calls in flight per engine; more wait in its queue
    engine_max_queued: int = 4096  # calls queued per engine; beyond that a 503 (retried by the SDKs)
    engine_probe_interval_s: float = 1.0  # how often a failed engine is probed to bring it back
    public_model: str = "policy"  # the name agents ask for
    require_token: bool = False  # refuse calls without a rollout token (else: the adhoc run)
    # How agents reach this gateway (behind a proxy, or from sandboxes on other machines): rollouts' base_url
    # is built on it. http(s), a host, an optional path; no credentials, query or fragment (check_public_url).
    public_url: str | None = None
    # Host header names served besides loopback and public_url's host (DNS rebinding: a browser page
    # of another site reaching this gateway sends that site's name); "*" serves any name.
    allowed_hosts: tuple[str, ...] = ()
    engine_timeout_s: float = 600.0  # one engine call, end to end
    max_body_bytes: int = 32 * 1024 * 1024  # larger bodies get a 413
    base_model: str | None = None  # the engine's base model name; discovered from /v1/models if None
    # The model folder (chat template + tokenizer) for tito capture; discovered from the engine's
    # /v1/models "root" when it is a local folder.
    model_dir: str | None = None
    # The managed engine's dtype and why it was chosen (harnessrl.engine.hardware), shown on /health and
    # /metrics; None when attached to an engine started elsewhere.
    engine_dtype: str | None = None
    engine_dtype_reason: str | None = None
    # Mean |engine - learner| log-prob per probe token a publication may differ by (contracts.adapter_proof);
    # None: set by the dtypes (engine_dtype, the learner's).
    adapter_probe_tolerance: float | None = None
    max_staleness: int = 2  # adapter versions kept loaded beyond the current one: max_staleness + 1
    # adapters the engines hold at once, every policy's together (gateway.policy.policy_set); past it the
    # ones no call needs are unloaded first, least recently used. 0: no bound of the gateway's own
    max_adapters: int = 0
    # sessions one live key may open per minute, after a burst of live_session_burst (gateway.request.session_rate);
    # past it a call that would open one is a 429 with Retry-After. 0: no bound
    live_sessions_per_minute: float = 60.0
    live_session_burst: int = 20
    # bytes one rollout's recorded calls may take in the store together (store.stored_bytes: requests as stored,
    # responses, token arrays); past it a call is a 413 in its dialect, what was recorded stays. 0: no bound
    rollout_max_stored_bytes: int = 256 * 1024 * 1024
    # seconds between looks at the store for versions other gateways published (gateway.policy.follower); 0: never
    follow_interval_s: float = 0.5
    # Who writes the engine's answers (store.records.CALL_SOURCES): "policy" for vLLM; a teacher
    # gateway (harnessrl.teachers.teacher) records "teacher" or "demonstration" calls, with no sampler log-probs.
    call_source: str = "policy"
    # Per rollout token, in this gateway process (gateway.boundary.token_caps): a sandbox that reaches the gateway
    # without our bridge (--public-url) is held to a bridge's caps here. The defaults mirror a bridge's
    # (sandboxes/bridge_limits.py: MAX_IN_FLIGHT, BODY_READ_TIMEOUT_S, BODY_TIMEOUT_S, IDLE_TIMEOUT_S).
    token_max_in_flight: int = 32  # requests of one token not yet answered in full; past it a 429
    body_read_timeout_s: float = 30.0  # seconds a model route's request body may go without a byte; then a 408
    body_timeout_s: float = 300.0  # seconds for a model route's whole request body; then a 408
    # seconds an idle keep-alive connection is kept (uvicorn's timeout_keep_alive; per connection, not per token)
    keep_alive_timeout_s: float = 120.0
    # seconds from a request's first byte (or a connection's accept) to the end of its head; then a 408
    # (gateway.boundary.connection_guard; per connection: a head names no token before it is in; HEADER_TIMEOUT_S)
    header_timeout_s: float = 30.0
    token_max_connections: int = 64  # connections one rollout token holds open at once; past it a 429 (MAX_CONNECTIONS)
    # bytes of a request's line and headers, counted as they arrive; past it a 431 and the connection closes
    # (gateway.boundary.connection_guard; the parser never sees the rest, so a huge head stalls no one)
    max_head_bytes: int = 64 * 1024
    # OTLP/HTTP traces endpoint (e.g. http://127.0.0.1:6006/v1/traces): each ended rollout exported as a
    # trace (gateway.recording.trace_export); None: no export
    otlp_endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.call_source not in CALL_SOURCES:
            raise ValueError(f"call_source must be one of {CALL_SOURCES}, got {self.call_source!r}")
        if not isinstance(self.admin_key, str) or not self.admin_key.strip():
            raise ValueError(
                "the gateway needs an admin key for its control plane (/api, /admin): "
                "`harnessrl serve` reads or creates $HARNESSRL_HOME/admin.key, or pass --admin-key"
            )
        if self.public_url is not None:
            check_public_url(self.public_url)
        if self.rollout_max_stored_bytes < 0:
            raise ValueError(
                f"rollout_max_stored_bytes must be 0 (no bound) or more, got {self.rollout_max_stored_bytes}"
            )
        for name in ("token_max_in_flight", "token_max_connections", "max_head_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("body_read_timeout_s", "body_timeout_s", "keep_alive_timeout_s", "header_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)}")

    @property
    def serves_adapters(self) -> bool:
        """Only a policy gateway holds adapters. A teacher's engine has none: a teacher gateway on a shared
        store neither restores nor follows the store's versions (failing to load them, it would mark every
        other gateway's loaded versions unloaded)."""
        return self.call_source == "policy"

    def engines(self) -> tuple[str, ...]:
        """The engines' base URLs, in the order given."""
        return self.engine_urls or (self.engine_url,)

    def served_hosts(self) -> frozenset[str]:
        """The Host names this gateway answers to (lower case, no port); contains "*" for any."""
        names = set(LOOPBACK_HOSTS) | {h.strip().lower().rstrip(".") for h in self.allowed_hosts if h.strip()}
        if self.public_url:
            public = urlsplit(self.public_url).hostname
            if public:
                names.add(public.lower())
        return frozenset(names)


def check_public_url(url: str) -> None:
    """Refuse a public URL sandboxes could not use as their base URL's root (ValueError naming the fix)."""
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"public URL {url!r} holds spaces or control characters: give http(s)://HOST[:PORT][/PATH]")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ValueError(f"public URL {url!r} is not a URL ({exc}); give http(s)://HOST[:PORT][/PATH]") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"public URL {url!r} must start with http:// or https://: give http(s)://HOST[:PORT][/PATH]")
    if not parts.hostname:
        raise ValueError(f"public URL {url!r} names no host: give http(s)://HOST[:PORT][/PATH]")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"public URL {url!r} carries credentials (user@): sandboxes are given this address, and their "
            "rollout token must be the only credential they hold; drop the user part"
        )
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError(
            f"public URL {url!r} has a query or fragment: rollouts' base URLs append /r/<token>/v1 to it; "
            "give http(s)://HOST[:PORT][/PATH]"
        )
