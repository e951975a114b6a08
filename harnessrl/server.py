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
        create_app(settings), host=host, port=port, log_level=log_level, access_log=False,
        loop="uvloop", http="httptools", timeout_graceful_shutdown=10,
    )
    return uvicorn.Server(config)


class BackgroundGateway:
    """The gateway on a uvicorn server in a daemon thread."""

    def __init__(self, settings: GatewaySettings, host: str = "127.0.0.1", port: int | None = None):
        self.host, self.port = host, port or free_port(host)
        self.url = f"http://{self.host}:{self.port}"
        self._server = uvicorn_server(settings, self.host, self.port)
        self._thread = threading.Thread(target=self._server.run, name="gateway", daemon=True)

    def start(self, timeout_s: float = 30.0) -> "BackgroundGateway":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)

    def __enter__(self) -> "BackgroundGateway":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
