"""Running the gateway under uvicorn, in the foreground (`serve`) or in a thread (demo, tests)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def uvicorn_server(settings: GatewaySettings, host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=10,
        timeout_keep_alive=75,  # agents pause between calls; a longer keep-alive avoids reconnect races
    )
    return uvicorn.Server(config)


class BackgroundServer:
    """An ASGI app on a uvicorn server in a daemon thread (its own event loop)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int | None = None):
        self.app = app
        self.host, self.port = host, port or free_port(host)
        self.url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http="httptools",
            timeout_keep_alive=75,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    def start(self, timeout_s: float = 300.0) -> BackgroundServer:
        """Serve, and return once the server listens; a guard against hangs, generous for busy machines."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"server on {self.url} stopped while starting (its log says why)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start on {self.url} within {timeout_s:.0f} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BackgroundGateway(BackgroundServer):
    """The gateway in a thread (the demo, tests)."""

    def __init__(self, settings: GatewaySettings, host: str = "127.0.0.1", port: int | None = None):
        super().__init__(create_app(settings), host, port)
