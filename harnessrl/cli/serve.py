"""`harnessrl serve`: vLLM engines (started or attached) and the recording gateway in front of them.

The command is its options and one call: harnessrl/cli/serving.py does what they ask."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from contracts.adapter_proof import NOISE_MARGIN, TOLERANCE
from harnessrl.cli.options import DatabaseUrl


def serve(
    model: Annotated[Path | None, typer.Option(help="Model folder for a managed vLLM")] = None,
    engine_url: Annotated[
        list[str] | None,
        typer.Option(help="Attach to a running vLLM instead; repeat it for several engines behind this gateway"),
    ] = None,
    engines: Annotated[
        int,
        typer.Option(
            min=1,
            help="Managed engines with --model: N vLLM processes on CPUs (each its own port), one vLLM "
            "with --data-parallel-size N on GPUs",
        ),
    ] = 1,
    engine_max_in_flight: Annotated[
        int, typer.Option(min=1, help="Calls in flight per engine; more wait in its queue (back-pressure)")
    ] = 256,
    host: str = "127.0.0.1",
    port: int = 8000,
    database_url: DatabaseUrl = None,
    public_model: Annotated[str, typer.Option(help="Model name agents ask for")] = "policy",
    require_token: Annotated[bool, typer.Option(help="Refuse calls without a rollout token")] = False,
    engine_port: Annotated[int | None, typer.Option(help="Port of the managed vLLM")] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            min=16,
            help="Context of the managed vLLM in tokens \\[default: the model's own maximum (config.json "
            "max_position_embeddings)]",
        ),
    ] = None,
    max_lora_rank: int = 16,
    engine_start_timeout: float = 900.0,
    dtype: Annotated[
        str,
        typer.Option(
            help="Serving dtype of the managed vLLM: auto (bfloat16 on GPUs and CPUs with native bf16, else "
            "float32), float32, bfloat16 or float16"
        ),
    ] = "auto",
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_ADMIN_KEY",
            help="The control plane's key (/api, /admin, the viewer's data) "
            "\\[default: $HARNESSRL_HOME/admin.key, created on first start]",
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="A Host name clients use besides loopback and --host, repeatable ('*': any)"),
    ] = None,
    max_staleness: Annotated[int, typer.Option(help="Adapter versions kept loaded behind the current one")] = 2,
    policies: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Policies (adapter lineages) served at once: sizes the managed vLLM's --max-loras and "
            "--max-cpu-loras and the adapters the gateway keeps loaded \\[default: the policies the store knows]",
        ),
    ] = None,
    tokenizer: Annotated[
        Path | None, typer.Option(help="Model folder for tito capture when attaching with --engine-url")
    ] = None,
    engine_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds one engine call may take; a hung engine then gives the client a 504")
    ] = 600.0,
    adapter_probe_tolerance: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="Mean |engine - learner| log-prob per probe token a published adapter may show before the "
            f"publication fails, at least ({NOISE_MARGIN:g}x the engine's own noise on the base model widens it; "
            "an engine far nearer the adapter than the base model passes) "
            f"\\[default: by dtype, {TOLERANCE['float32']:g} float32, {TOLERANCE['bfloat16']:g} bfloat16]",
        ),
    ] = None,
    live_sessions_per_minute: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Sessions one live key may open per minute after a burst of 20; past it: 429 (0: no bound)",
        ),
    ] = 60.0,
    rollout_max_stored_mib: Annotated[
        int,
        typer.Option(
            min=0,
            help="MiB one rollout's recorded calls may take in the store; past it its calls get a 413, what it "
            "recorded is kept (0: no bound)",
        ),
    ] = 256,
    token_max_in_flight: Annotated[
        int, typer.Option(min=1, help="Requests one rollout token may have in flight; past it: 429 (a bridge's cap)")
    ] = 32,
    token_max_connections: Annotated[
        int, typer.Option(min=1, help="Connections one rollout token may hold open; past it: 429 (a bridge's cap)")
    ] = 64,
    max_head_kib: Annotated[
        int,
        typer.Option(
            min=1, help="KiB of a request's line and headers the gateway reads; past it: 431, the connection closed"
        ),
    ] = 64,
    public_url: Annotated[
        str | None,
        typer.Option(
            help="The address remote sandboxes (other machines: Harbor's environments) are given for this "
            "gateway, e.g. https://gw.example.org:8443; rollouts' base URLs are built on it and its host is "
            "served. The rollout token is the only credential they hold, held to a bridge's caps per token "
            "\\[default: the address each request came to]",
        ),
    ] = None,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            help="Export each ended rollout as an OpenTelemetry trace over OTLP/HTTP to this URL "
            "(e.g. Phoenix: http://127.0.0.1:6006/v1/traces); off by default, never on the call path",
        ),
    ] = None,
) -> None:
    """Start vLLM (or attach to one) and the recording gateway in front of it."""
    from harnessrl.cli.serving import ServeOptions, start_gateway

    start_gateway(
        ServeOptions(
            model=model,
            engine_url=engine_url,
            engines=engines,
            engine_max_in_flight=engine_max_in_flight,
            host=host,
            port=port,
            database_url=database_url,
            public_model=public_model,
            require_token=require_token,
            engine_port=engine_port,
            max_model_len=max_model_len,
            max_lora_rank=max_lora_rank,
            engine_start_timeout=engine_start_timeout,
            dtype=dtype,
            admin_key=admin_key,
            allowed_host=allowed_host,
            max_staleness=max_staleness,
            policies=policies,
            tokenizer=tokenizer,
            engine_timeout=engine_timeout,
            adapter_probe_tolerance=adapter_probe_tolerance,
            live_sessions_per_minute=live_sessions_per_minute,
            rollout_max_stored_mib=rollout_max_stored_mib,
            token_max_in_flight=token_max_in_flight,
            token_max_connections=token_max_connections,
            max_head_kib=max_head_kib,
            public_url=public_url,
            otlp_endpoint=otlp_endpoint,
        )
    )
