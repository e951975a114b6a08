"""`harnessrl serve`'s managed engine: started for the gateway, watched while it serves, stopped with it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from rich.console import Console

from harnessrl.engine_process import EngineFailed, EngineLaunch, ManagedProcess


def start_engine(launch: EngineLaunch, log_path: Path, timeout_s: float, console: Console) -> ManagedProcess:
    """A vLLM for the gateway, healthy; EngineFailed (with its last log lines) if it never gets there."""
    engine = ManagedProcess.vllm(launch, log_path)
    try:
        with console.status(f"starting vLLM on {engine.url} (log: {engine.log_path})"):
            engine.start().wait_healthy(timeout_s)
    except EngineFailed:
        engine.stop()
        raise
    return engine


def serve_until_stopped(server, engine: ManagedProcess | None, console: Console, sockets=None) -> int:
    """Run the gateway (a uvicorn server, on ``sockets`` already bound when given) until SIGTERM/SIGINT; a dying
    engine stops it with the engine's last log lines. The exit code: 1 when the engine died, else 0."""
    died = threading.Event()

    def watch() -> None:
        while not server.should_exit:
            if engine is not None and not engine.alive():
                died.set()
                server.should_exit = True
                return
            threading.Event().wait(1.0)

    threading.Thread(target=watch, name="engine-watch", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    try:
        server.run(sockets=sockets)
    finally:
        if engine is not None:
            if died.is_set():
                console.print("[bold red]vLLM died[/]")
                console.print(engine.why(), markup=False, highlight=False)  # log text: no markup in it
            engine.stop()
    return 1 if died.is_set() else 0
