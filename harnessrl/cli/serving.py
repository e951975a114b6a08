"""What `harnessrl serve` does with its options: check them as the CLI does (errors naming the fix), hold the
port before anything slow, start the managed vLLM (or take the attached engines' URLs), set the gateway up on
the store and serve until stopped. harnessrl/cli/serve.py holds the options and their help."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.markup import escape

from harnessrl.cli.options import console, fail, resolve_admin_key, resolve_database_url, upgrade_store, with_store
from harnessrl.engine.lora_slots import LoraSlots, lora_slots

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class ServeOptions:
    """`harnessrl serve`'s command line as given, one field per option (named as the option)."""

    model: Path | None
    engine_url: list[str] | None
    engines: int
    engine_max_in_flight: int
    host: str
    port: int
    database_url: str | None
    public_model: str
    require_token: bool
    engine_port: int | None
    max_model_len: int | None
    max_lora_rank: int
    engine_start_timeout: float
    dtype: str
    admin_key: str | None
    allowed_host: list[str] | None
    max_staleness: int
    policies: int | None
    tokenizer: Path | None
    engine_timeout: float
    adapter_probe_tolerance: float | None
    live_sessions_per_minute: float
    rollout_max_stored_mib: int
    token_max_in_flight: int
    token_max_connections: int
    max_head_kib: int
    public_url: str | None
    otlp_endpoint: str | None


def start_gateway(options: ServeOptions) -> None:
    """Serve until stopped; exits with the watchdog's code. The port is taken first, so a busy one fails before
    vLLM spends minutes starting, and closed again if anything fails before uvicorn owns it."""
    from harnessrl.engine import watchdog as engine_watchdog
    from harnessrl.server import uvicorn_server

    _check(options)
    listener = _listener(options.host, options.port)
    try:
        key = resolve_admin_key(options.admin_key, create=True)
        settings, engine = _gateway_settings(options, key)
    except BaseException:  # uvicorn owns the socket once it serves; until then it is ours to close
        listener.close()
        raise
    server = uvicorn_server(settings, options.host, options.port, log_level="info")
    _print_viewer_url(options.host, options.port, key, from_file=not options.admin_key)
    _warn_of_a_loopback_public_url(options.public_url, options.host)
    exit_code = engine_watchdog.serve_until_stopped(server, engine, console, sockets=[listener])
    raise typer.Exit(code=exit_code)


def _check(options: ServeOptions) -> None:
    """The options that contradict each other, or a --public-url the gateway could not build URLs on."""
    from gateway.settings import check_public_url

    if (options.model is None) == (not options.engine_url):
        raise fail("give exactly one of --model DIR (start vLLM) or --engine-url URL (attach)")
    if options.public_url is not None:
        try:
            check_public_url(options.public_url)
        except ValueError as exc:
            raise fail(escape(f"--public-url: {exc}")) from None  # the URL and the form hold brackets
    if options.engines > 1 and options.model is None:
        raise fail("--engines N starts N managed engines with --model DIR; to attach to several, repeat --engine-url")


def _listener(host: str, port: int):
    """The gateway's listening socket, or the CLI message naming the fix when the port is taken."""
    from harnessrl.server import listening_socket

    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise fail(
            f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port or stop what holds it"
        ) from None


def _gateway_settings(options: ServeOptions, key: str):
    """The gateway's settings on the migrated store, and the managed engine (None when attaching): started
    here, since its URLs and dtype are the settings' own."""
    url = resolve_database_url(options.database_url)
    upgrade_store(url)
    slots = lora_slots(options.policies or _known_policies(url), options.max_staleness)
    if options.model is None:
        return _settings(options, url, key, slots, options.engine_url, None), None
    choice = _engine_dtype(options.dtype)
    engine = _managed_engine(options, choice.dtype, slots)
    return _settings(options, url, key, slots, engine.urls, choice), engine


def _settings(options: ServeOptions, url: str, key: str, slots: LoraSlots, engine_urls: list[str], choice):
    """GatewaySettings from the options, the store, the engines' URLs and the managed engine's dtype choice."""
    from gateway.settings import GatewaySettings

    model_dir = options.model or options.tokenizer
    return GatewaySettings(
        engine_dtype=choice.dtype if choice else None,
        engine_dtype_reason=choice.reason if choice else None,
        database_url=url,
        engine_url=engine_urls[0],
        engine_urls=tuple(engine_urls) if len(engine_urls) > 1 else (),
        engine_max_in_flight=options.engine_max_in_flight,
        public_model=options.public_model,
        require_token=options.require_token,
        admin_key=key,
        max_staleness=options.max_staleness,
        # an attached engine's slots are its own: bound the gateway only when told how many policies
        max_adapters=slots.max_cpu_loras if options.model is not None or options.policies else 0,
        allowed_hosts=_served_names(options.host, options.allowed_host or []),
        model_dir=str(model_dir.resolve()) if model_dir else None,
        engine_timeout_s=options.engine_timeout,
        adapter_probe_tolerance=options.adapter_probe_tolerance,
        otlp_endpoint=options.otlp_endpoint,
        public_url=options.public_url,
        live_sessions_per_minute=options.live_sessions_per_minute,
        rollout_max_stored_bytes=options.rollout_max_stored_mib * 1024 * 1024,
        token_max_in_flight=options.token_max_in_flight,
        token_max_connections=options.token_max_connections,
        max_head_bytes=options.max_head_kib * 1024,
    )


def _known_policies(url: str) -> int:
    """How many policies the store knows (at least the default one)."""
    return len(with_store(url, lambda store: store.policies.names()))


def _managed_engine(options: ServeOptions, dtype: str, slots: LoraSlots):
    """Start the vLLM engine(s) ``serve --model`` manages; the CLI message names the fix when they cannot start."""
    from harnessrl.engine import watchdog as engine_watchdog
    from harnessrl.engine.process import EngineFailed, EngineLaunch, model_max_len
    from harnessrl.server import free_port
    from harnessrl.settings import logs_dir

    model = options.model.resolve()
    try:
        context = options.max_model_len or model_max_len(model)
        launch = EngineLaunch(
            model_dir=model,
            port=options.engine_port or free_port(),
            max_model_len=context,
            max_lora_rank=options.max_lora_rank,
            max_loras=slots.max_loras,
            max_cpu_loras=slots.max_cpu_loras,
            dtype=dtype,
        )
        return engine_watchdog.start_engines(launch, options.engines, logs_dir(), options.engine_start_timeout, console)
    except EngineFailed as exc:  # not a model folder, or vLLM died starting: the message names the fix
        raise fail(str(exc)) from None


def _served_names(host: str, extra: list[str]) -> tuple[str, ...]:
    """Host names the gateway answers to: the --host it listens on (unless a wildcard) and --allowed-host."""
    return tuple(([] if host in WILDCARDS else [host]) + extra)


def _print_viewer_url(host: str, port: int, key: str, from_file: bool) -> None:
    """The viewer's URL with the key in its fragment (never sent to the server, kept by the page)."""
    from harnessrl.settings import admin_key_path

    shown = "127.0.0.1" if host in WILDCARDS else (f"[{host}]" if ":" in host else host)
    console.print(f"viewer: http://{shown}:{port}/ui/#key={key}", markup=False, highlight=False, soft_wrap=True)
    if from_file:
        console.print(
            f"admin key: {admin_key_path()}; run, train, ls and the other commands read it there",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _warn_of_a_loopback_public_url(public_url: str | None, host: str) -> None:
    """A --public-url given to a gateway listening on loopback only: remote sandboxes cannot reach it without
    a proxy, which may be the intent, so a note rather than an error."""
    if public_url and host in LOOPBACK:
        console.print(
            f"--public-url {public_url}: this gateway listens on {host} only; remote sandboxes reach it through a "
            "proxy forwarding that address here, or give --host 0.0.0.0",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _engine_dtype(requested: str):
    """The managed engine's dtype for this machine, logged with its reason."""
    from harnessrl.engine.hardware import machine_dtype

    try:
        choice = machine_dtype(requested)
    except ValueError as exc:
        raise fail(str(exc)) from None
    console.print(f"engine dtype {choice.reason}")
    return choice
