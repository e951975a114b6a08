"""`harnessrl serve`: vLLM engines (started or attached) and the recording gateway in front of them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harnessrl.cli.options import (
    DatabaseUrl,
    console,
    fail,
    resolve_admin_key,
    resolve_database_url,
    upgrade_store,
    with_store,
)
from harnessrl.engines.lora_slots import LoraSlots, lora_slots


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
            help="Context of the managed vLLM in tokens [default: the model's own maximum (config.json "
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
            "[default: $HARNESSRL_HOME/admin.key, created on first start]",
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
            "--max-cpu-loras and the adapters the gateway keeps loaded [default: the policies the store knows]",
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
            "publication fails, at least (twice the engine's own noise on the base model widens it) "
            "[default: by dtype, 0.001 float32, 0.1 bfloat16]",
        ),
    ] = None,
    live_sessions_per_minute: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Sessions one live key may open per minute after a burst of 20; past it: 429 (0: no bound)",
        ),
    ] = 60.0,
    token_max_in_flight: Annotated[
        int, typer.Option(min=1, help="Requests one rollout token may have in flight; past it: 429 (a bridge's cap)")
    ] = 32,
    token_max_connections: Annotated[
        int, typer.Option(min=1, help="Connections one rollout token may hold open; past it: 429 (a bridge's cap)")
    ] = 64,
    public_url: Annotated[
        str | None,
        typer.Option(
            help="The address remote sandboxes (other machines: Harbor's environments) are given for this "
            "gateway, e.g. https://gw.example.org:8443; rollouts' base URLs are built on it and its host is "
            "served. The rollout token is the only credential they hold, held to a bridge's caps per token "
            "[default: the address each request came to]",
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
    from gateway.settings import GatewaySettings, check_public_url
    from harnessrl.engines import watchdog as engine_watchdog
    from harnessrl.server import listening_socket, uvicorn_server

    if (model is None) == (not engine_url):
        raise fail("give exactly one of --model DIR (start vLLM) or --engine-url URL (attach)")
    if public_url is not None:
        try:
            check_public_url(public_url)
        except ValueError as exc:
            raise fail(escape(f"--public-url: {exc}")) from None  # the URL and the form hold brackets
    if engines > 1 and model is None:
        raise fail("--engines N starts N managed engines with --model DIR; to attach to several, repeat --engine-url")
    try:
        listener = listening_socket(host, port)
    except OSError as exc:
        raise fail(
            f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port or stop what holds it"
        ) from None
    try:
        key = resolve_admin_key(admin_key, create=True)
        url = resolve_database_url(database_url)
        upgrade_store(url)
        slots = lora_slots(policies or _known_policies(url), max_staleness)
        engine = choice = None
        if model is not None:
            choice = _engine_dtype(dtype)
            engine = _managed_engine(
                model, choice.dtype, engine_port, max_model_len, max_lora_rank, engines, engine_start_timeout, slots
            )
            engine_url = engine.urls
        model_dir = model or tokenizer
        settings = GatewaySettings(
            engine_dtype=choice.dtype if choice else None,
            engine_dtype_reason=choice.reason if choice else None,
            database_url=url,
            engine_url=engine_url[0],
            engine_urls=tuple(engine_url) if len(engine_url) > 1 else (),
            engine_max_in_flight=engine_max_in_flight,
            public_model=public_model,
            require_token=require_token,
            admin_key=key,
            max_staleness=max_staleness,
            # an attached engine's slots are its own: bound the gateway only when told how many policies
            max_adapters=slots.max_cpu_loras if model is not None or policies else 0,
            allowed_hosts=_served_names(host, allowed_host or []),
            model_dir=str(model_dir.resolve()) if model_dir else None,
            engine_timeout_s=engine_timeout,
            adapter_probe_tolerance=adapter_probe_tolerance,
            otlp_endpoint=otlp_endpoint,
            public_url=public_url,
            live_sessions_per_minute=live_sessions_per_minute,
            token_max_in_flight=token_max_in_flight,
            token_max_connections=token_max_connections,
        )
    except BaseException:  # uvicorn owns the socket once it serves; until then it is ours to close
        listener.close()
        raise
    server = uvicorn_server(settings, host, port, log_level="info")
    _print_viewer_url(host, port, key, from_file=not admin_key)
    if public_url and host in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"--public-url {public_url}: this gateway listens on {host} only; remote sandboxes reach it through a "
            "proxy forwarding that address here, or give --host 0.0.0.0",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    exit_code = engine_watchdog.serve_until_stopped(server, engine, console, sockets=[listener])
    raise typer.Exit(code=exit_code)


def _known_policies(url: str) -> int:
    """How many policies the store knows (at least the default one)."""
    return len(with_store(url, lambda store: store.policies.names()))


def _managed_engine(
    model: Path, dtype: str, engine_port, max_model_len, max_lora_rank: int, engines: int, timeout_s, slots: LoraSlots
):
    """Start the vLLM engine(s) ``serve --model`` manages; the CLI message names the fix when they cannot start."""
    from harnessrl.engines import watchdog as engine_watchdog
    from harnessrl.engines.process import EngineFailed, EngineLaunch, model_max_len
    from harnessrl.server import free_port
    from harnessrl.settings import logs_dir

    try:
        context = max_model_len or model_max_len(model.resolve())
        launch = EngineLaunch(
            model_dir=model.resolve(),
            port=engine_port or free_port(),
            max_model_len=context,
            max_lora_rank=max_lora_rank,
            max_loras=slots.max_loras,
            max_cpu_loras=slots.max_cpu_loras,
            dtype=dtype,
        )
        return engine_watchdog.start_engines(launch, engines, logs_dir(), timeout_s, console)
    except EngineFailed as exc:  # not a model folder, or vLLM died starting: the message names the fix
        raise fail(str(exc)) from None


def _served_names(host: str, extra: list[str]) -> tuple[str, ...]:
    """Host names the gateway answers to: the --host it listens on (unless a wildcard) and --allowed-host."""
    wildcard = host in ("0.0.0.0", "::", "")
    return tuple(([] if wildcard else [host]) + extra)


def _print_viewer_url(host: str, port: int, key: str, from_file: bool) -> None:
    """The viewer's URL with the key in its fragment (never sent to the server, kept by the page)."""
    from harnessrl.settings import admin_key_path

    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else (f"[{host}]" if ":" in host else host)
    console.print(f"viewer: http://{shown}:{port}/ui/#key={key}", markup=False, highlight=False, soft_wrap=True)
    if from_file:
        console.print(
            f"admin key: {admin_key_path()}; run, train, ls and the other commands read it there",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _engine_dtype(requested: str):
    """The managed engine's dtype for this machine, logged with its reason."""
    from harnessrl.engines.hardware import machine_dtype

    try:
        choice = machine_dtype(requested)
    except ValueError as exc:
        raise fail(str(exc)) from None
    console.print(f"engine dtype {choice.reason}")
    return choice
