"""What `harnessrl serve` does with its config: check it as the CLI does (errors naming the fix), hold the
port before anything slow, start the managed vLLM (or take the attached engines' URLs), set the gateway up on
the store and serve until stopped. harnessrl/config/serve.py holds the keys, each an option with its help."""

from __future__ import annotations

import typer
from rich.markup import escape

from harnessrl.cli.options import console, fail, resolve_admin_key, resolve_database_url, upgrade_store, with_store
from harnessrl.config.serve import WILDCARDS, ServeConfig, Started, gateway_settings
from harnessrl.engine.lora_slots import LoraSlots, lora_slots

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def start_gateway(config: ServeConfig) -> None:
    """Serve until stopped; exits with the watchdog's code. The port is taken first, so a busy one fails before
    vLLM spends minutes starting, and closed again if anything fails before uvicorn owns it."""
    from harnessrl.engine import watchdog as engine_watchdog
    from harnessrl.server import uvicorn_server

    gateway = config.gateway
    _check(config)
    listener = _listener(gateway.host, gateway.port)
    try:
        key = resolve_admin_key(gateway.admin_key, create=True)
        settings, engine = _gateway_settings(config, key)
    except BaseException:  # uvicorn owns the socket once it serves; until then it is ours to close
        listener.close()
        raise
    server = uvicorn_server(settings, gateway.host, gateway.port, log_level="info")
    _print_viewer_url(gateway.host, gateway.port, key, from_file=not gateway.admin_key)
    _warn_of_a_loopback_public_url(gateway.public_url, gateway.host)
    exit_code = engine_watchdog.serve_until_stopped(server, engine, console, sockets=[listener])
    raise typer.Exit(code=exit_code)


def _check(config: ServeConfig) -> None:
    """The options that contradict each other, or a --public-url the gateway could not build URLs on."""
    from gateway.settings import check_public_url

    engine, public_url = config.engine, config.gateway.public_url
    if (engine.model is None) == (not engine.urls):
        raise fail("give exactly one of --model DIR (start vLLM) or --engine-url URL (attach)")
    if public_url is not None:
        try:
            check_public_url(public_url)
        except ValueError as exc:
            raise fail(escape(f"--public-url: {exc}")) from None  # the URL and the form hold brackets
    if engine.count > 1 and engine.model is None:
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


def _gateway_settings(config: ServeConfig, key: str):
    """The gateway's settings on the migrated store, and the managed engine (None when attaching): started
    here, since its URLs and dtype are the settings' own."""
    url = resolve_database_url(config.store.url)
    upgrade_store(url)
    policies = config.policies
    slots = lora_slots(policies.count or _known_policies(url), policies.max_staleness)
    # an attached engine's slots are its own: bound the gateway only when told how many policies
    bound = slots.max_cpu_loras if config.engine.model is not None or policies.count else 0
    if config.engine.model is None:
        started = Started(url, key, tuple(config.engine.urls), max_adapters=bound)
        return gateway_settings(config, started), None
    choice = _engine_dtype(config.engine.dtype)
    engine = _managed_engine(config, choice.dtype, slots)
    return gateway_settings(config, Started(url, key, tuple(engine.urls), choice, bound)), engine


def _known_policies(url: str) -> int:
    """How many policies the store knows (at least the default one)."""
    return len(with_store(url, lambda store: store.policies.names()))


def _managed_engine(config: ServeConfig, dtype: str, slots: LoraSlots):
    """Start the vLLM engine(s) ``serve --model`` manages; the CLI message names the fix when they cannot start."""
    from harnessrl.engine import watchdog as engine_watchdog
    from harnessrl.engine.process import EngineFailed, EngineLaunch, model_max_len
    from harnessrl.server import free_port
    from harnessrl.settings import logs_dir

    engine = config.engine
    model = engine.model.resolve()
    try:
        context = engine.max_model_len or model_max_len(model)
        launch = EngineLaunch(
            model_dir=model,
            port=engine.port or free_port(),
            max_model_len=context,
            max_lora_rank=engine.max_lora_rank,
            max_loras=slots.max_loras,
            max_cpu_loras=slots.max_cpu_loras,
            dtype=dtype,
        )
        return engine_watchdog.start_engines(launch, engine.count, logs_dir(), engine.start_timeout_s, console)
    except EngineFailed as exc:  # not a model folder, or vLLM died starting: the message names the fix
        raise fail(str(exc)) from None


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
