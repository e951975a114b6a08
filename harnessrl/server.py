"""Running the gateway under uvicorn, in the foreground (`serve`) or in a thread (demo, tests)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from gateway.app import create_app
from gateway.boundary.connection_guard import guarded
from gateway.settings import GatewaySettings


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listening_socket(host: str, port: int) -> socket.socket:
    """The gateway's socket, bound before its engine starts: a taken --port fails in a second rather than after
    the engine's minutes, and no other process can take the port while the engine loads.

    Raises OSError when the port is taken (callers name the fix)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT leftovers are no conflict
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def uvicorn_server(settings: GatewaySettings, host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop",
        http=guarded(settings),  # httptools: heads timed and sized, early answers closed, connections counted
        timeout_graceful_shutdown=10,
        proxy_headers=False,  # no client address is read: X-Forwarded-* is neither trusted nor parsed per request
        # agents pause between calls: longer than clients' own pool expiry (httpx 5 s, undici 4 s), so they close
        # first; a bridge's idle timeout (gateway.settings)
        timeout_keep_alive=settings.keep_alive_timeout_s,
    )
    return uvicorn.Server(config)


class BackgroundServer:
    """An ASGI app on a uvicorn server in a daemon thread (its own event loop)."""

    def __init__(
        self, app, host: str = "127.0.0.1", port: int | None = None, http="httptools", keep_alive_s: float = 75
    ):
        self.app = app
        # bound now and handed to uvicorn, so no other process can take the port between choosing and serving
        self._socket = listening_socket(host, port or 0)
        self.host, self.port = host, self._socket.getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http=http,
            timeout_keep_alive=keep_alive_s,
            proxy_headers=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="uvicorn", daemon=True
        )

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
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self._socket.close()  # uvicorn closed it if it served; a server never started still holds it

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BackgroundGateway(BackgroundServer):
    """The gateway in a thread (the demo, tests)."""

    def __init__(self, settings: GatewaySettings, host: str = "127.0.0.1", port: int | None = None):
        super().__init__(create_app(settings), host, port, guarded(settings), settings.keep_alive_timeout_s)
