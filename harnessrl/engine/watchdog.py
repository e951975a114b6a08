"""`harnessrl serve`'s managed engine: started for the gateway, watched while it serves, stopped with it."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from rich.console import Console

from harnessrl.engine.hardware import has_gpu
from harnessrl.engine.process import EngineGroup, EngineLaunch, ManagedProcess, engine_launches
from harnessrl.server import free_port


def start_engines(launch: EngineLaunch, count: int, logs: Path, timeout_s: float, console: Console) -> EngineGroup:
    """The one way `harnessrl serve` starts its vLLM engines, one or ``count`` (``engine_launches``: on CPUs
    each on its own port, on GPUs one with ``--data-parallel-size``), healthy; EngineFailed (with their
    last log lines) if they never get there."""
    ports = [launch.port] + [free_port() for _ in range(count - 1)]
    launches = engine_launches(launch, count, ports, has_gpu(), sorted(os.sched_getaffinity(0)))
    group = EngineGroup([ManagedProcess.vllm(one, logs / f"engine-{one.port}.log") for one in launches])
    with console.status(f"starting vLLM on {', '.join(group.urls)} (logs: {logs})"):
        return group.start(timeout_s)


def serve_until_stopped(server, engine: EngineGroup | None, console: Console, sockets=None) -> int:
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
