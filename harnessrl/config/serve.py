"""`harnessrl serve`'s config: the gateway's address and keys, the vLLM engines it starts or attaches to, the
store, the policies it serves and the limits it holds clients to. Each key is its option (``--<name>`` or the
flag its ``cli(...)`` names), declared here once; a default the gateway has too is read from
``GatewaySettings`` (gateway/settings.py), so it is written in one place.

``gateway_settings`` builds the gateway's settings from this config and what starting the engines resolved: the
one place a ``GatewaySettings`` is made (`serve`, quickstart's own gateway, `demo` and a teacher's gateway)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from contracts.adapter_proof import NOISE_MARGIN, TOLERANCE
from gateway.settings import GatewaySettings
from harnessrl.config.files import LoosePath, Section, cli
from harnessrl.config.sections import StoreConfig

KIB, MIB = 1024, 1024 * 1024
WILDCARDS = ("0.0.0.0", "::", "")  # a --host listening on every address: no host name of its own
GATEWAY = {field.name: field.default for field in dataclasses.fields(GatewaySettings)}  # the gateway's defaults


class ServeGatewayConfig(Section):
    """Where the gateway listens, how clients reach it and the keys it holds."""

    host: str = Field("127.0.0.1", description="The address the gateway listens on (0.0.0.0: every one)")
    port: int = Field(8000, ge=0, le=65535, description="The gateway's port")
    public_url: str | None = Field(
        None,
        description="The address remote sandboxes (other machines: Harbor's environments) are given for this "
        "gateway, e.g. https://gw.example.org:8443; rollouts' base URLs are built on it and its host is served. "
        "The rollout token is the only credential they hold, held to a bridge's caps per token "
        "[default: the address each request came to]",
    )
    allowed_hosts: list[str] = Field(
        [],
        description="A Host name clients use besides loopback and --host, repeatable ('*': any)",
        json_schema_extra=cli("--allowed-host"),
    )
    public_model: str = Field(GATEWAY["public_model"], description="Model name agents ask for")
    require_token: bool = Field(GATEWAY["require_token"], description="Refuse calls without a rollout token")
    admin_key: str | None = Field(  # a secret: never printed nor stored
        None,
        exclude=True,
        repr=False,
        description="The control plane's key (/api, /admin, the viewer's data) [default: $HARNESSRL_HOME/admin.key, "
        "created on first start]",
        json_schema_extra=cli(envvar="HARNESSRL_ADMIN_KEY"),
    )
    otlp_endpoint: str | None = Field(
        None,
        description="Export each ended rollout as an OpenTelemetry trace over OTLP/HTTP to this URL (e.g. Phoenix: "
        "http://127.0.0.1:6006/v1/traces); off by default, never on the call path",
    )


class ServeEngineConfig(Section):
    """The vLLM servers behind the gateway: started here (``model``) or attached to (``urls``)."""

    model: LoosePath | None = Field(None, description="Model folder for a managed vLLM")
    urls: list[str] = Field(
        [],
        description="Attach to a running vLLM instead; repeat it for several engines behind this gateway",
        json_schema_extra=cli("--engine-url"),
    )
    count: int = Field(
        1,
        ge=1,
        description="Managed engines with --model: N vLLM processes on CPUs (each its own port), one vLLM with "
        "--data-parallel-size N on GPUs",
        json_schema_extra=cli("--engines"),
    )
    port: int | None = Field(
        None, ge=0, le=65535, description="Port of the managed vLLM", json_schema_extra=cli("--engine-port")
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="Context of the managed vLLM in tokens [default: the model's own maximum (config.json "
        "max_position_embeddings)]",
    )
    max_lora_rank: int = Field(16, ge=1, description="The largest LoRA rank the managed vLLM loads")
    dtype: str = Field(
        "auto",
        description="Serving dtype of the managed vLLM: auto (bfloat16 on GPUs and CPUs with native bf16, else "
        "float32), float32, bfloat16 or float16",
    )
    start_timeout_s: float = Field(
        900.0,
        gt=0.0,
        description="Seconds the managed vLLM may take to start",
        json_schema_extra=cli("--engine-start-timeout"),
    )
    tokenizer: LoosePath | None = Field(
        None, description="Model folder for tito capture when attaching with --engine-url"
    )
    timeout_s: float = Field(
        GATEWAY["engine_timeout_s"],
        ge=0.1,
        description="Seconds one engine call may take; a hung engine then gives the client a 504",
        json_schema_extra=cli("--engine-timeout"),
    )
    max_in_flight: int = Field(
        GATEWAY["engine_max_in_flight"],
        ge=1,
        description="Calls in flight per engine; more wait in its queue (back-pressure)",
        json_schema_extra=cli("--engine-max-in-flight"),
    )

    def model_folder(self) -> Path | None:
        """The folder whose chat template and tokenizer tito renders with: the managed model's, else --tokenizer."""
        folder = self.model or self.tokenizer
        return folder.resolve() if folder else None


class ServePoliciesConfig(Section):
    """The policies (adapter lineages) served at once and their versions."""

    count: int | None = Field(
        None,
        ge=1,
        description="Policies (adapter lineages) served at once: sizes the managed vLLM's --max-loras and "
        "--max-cpu-loras and the adapters the gateway keeps loaded [default: the policies the store knows]",
        json_schema_extra=cli("--policies"),
    )
    max_staleness: int = Field(
        GATEWAY["max_staleness"], ge=0, description="Adapter versions kept loaded behind the current one"
    )
    adapter_probe_tolerance: float | None = Field(
        None,
        ge=0.0,
        description="Mean |engine - learner| log-prob per probe token a published adapter may show before the "
        f"publication fails, at least ({NOISE_MARGIN:g}x the engine's own noise on the base model widens it; an "
        "engine far nearer the adapter than the base model passes) "
        f"[default: by dtype, {TOLERANCE['float32']:g} float32, {TOLERANCE['bfloat16']:g} bfloat16]",
    )


class ServeLimitsConfig(Section):
    """What one client may take: sessions, stored bytes, requests and connections per token, request sizes."""

    live_sessions_per_minute: float = Field(
        GATEWAY["live_sessions_per_minute"],
        ge=0.0,
        description="Sessions one live key may open per minute after a burst of "
        f"{GATEWAY['live_session_burst']}; past it: 429 (0: no bound)",
    )
    rollout_max_stored_mib: int = Field(
        GATEWAY["rollout_max_stored_bytes"] // MIB,
        ge=0,
        description="MiB one rollout's recorded calls may take in the store; past it its calls get a 413, what it "
        "recorded is kept (0: no bound)",
    )
    token_max_in_flight: int = Field(
        GATEWAY["token_max_in_flight"],
        ge=1,
        description="Requests one rollout token may have in flight; past it: 429 (a bridge's cap)",
    )
    token_max_connections: int = Field(
        GATEWAY["token_max_connections"],
        ge=1,
        description="Connections one rollout token may hold open; past it: 429 (a bridge's cap)",
    )
    max_head_kib: int = Field(
        GATEWAY["max_head_bytes"] // KIB,
        ge=1,
        description="KiB of a request's line and headers the gateway reads; past it: 431, the connection closed",
    )
    max_body_mib: int = Field(
        GATEWAY["max_body_bytes"] // MIB, ge=1, description="MiB of a request's body; past it: 413"
    )


class ServeConfig(Section):
    """vLLM engines (started or attached) and the recording gateway in front of them (harnessrl/cli/serving.py)."""

    gateway: ServeGatewayConfig = ServeGatewayConfig()
    engine: ServeEngineConfig = ServeEngineConfig()
    store: StoreConfig = StoreConfig()
    policies: ServePoliciesConfig = ServePoliciesConfig()
    limits: ServeLimitsConfig = ServeLimitsConfig()


@dataclass(frozen=True)
class Started:
    """What starting a gateway resolved beside its config: the store's URL (migrated, with its async driver), the
    admin key, the engines' URLs, the managed engine's dtype choice (harnessrl.engine.hardware.DtypeChoice; None
    when attached), the adapters the gateway may keep loaded (0: no bound of its own) and whose answers it records
    (store.records.CALL_SOURCES: a teacher gateway's are "teacher" or "demonstration")."""

    database_url: str
    admin_key: str
    engine_urls: tuple[str, ...]
    dtype: Any = None
    max_adapters: int = 0
    call_source: str = "policy"


def gateway_settings(config: ServeConfig, started: Started) -> GatewaySettings:
    """The gateway's settings: ``config``'s sections, with what ``started`` resolved."""
    gateway, engine, policies, limits = config.gateway, config.engine, config.policies, config.limits
    folder = engine.model_folder()
    return GatewaySettings(
        database_url=started.database_url,
        admin_key=started.admin_key,
        engine_url=started.engine_urls[0],
        engine_urls=started.engine_urls if len(started.engine_urls) > 1 else (),
        engine_max_in_flight=engine.max_in_flight,
        engine_timeout_s=engine.timeout_s,
        engine_dtype=started.dtype.dtype if started.dtype else None,
        engine_dtype_reason=started.dtype.reason if started.dtype else None,
        model_dir=str(folder) if folder else None,
        public_model=gateway.public_model,
        require_token=gateway.require_token,
        public_url=gateway.public_url,
        allowed_hosts=tuple(([] if gateway.host in WILDCARDS else [gateway.host]) + gateway.allowed_hosts),
        otlp_endpoint=gateway.otlp_endpoint,
        max_staleness=policies.max_staleness,
        max_adapters=started.max_adapters,
        adapter_probe_tolerance=policies.adapter_probe_tolerance,
        live_sessions_per_minute=limits.live_sessions_per_minute,
        rollout_max_stored_bytes=limits.rollout_max_stored_mib * MIB,
        token_max_in_flight=limits.token_max_in_flight,
        token_max_connections=limits.token_max_connections,
        max_head_bytes=limits.max_head_kib * KIB,
        max_body_bytes=limits.max_body_mib * MIB,
        call_source=started.call_source,
    )
