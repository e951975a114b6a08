"""A network shaped like a remote provider's, for harbor:podman tests: its one route out is the gateway.

    agent container --(podman network, --internal: no route out)--> relay container :8000
        --(bind-mounted unix socket)--> this process's byte relay --> the gateway on 127.0.0.1:PORT

The relay copies bytes and checks nothing, as a provider's load balancer in front of a public gateway
would: no bridge, no per-sandbox caps, no host network. The gateway is started with
``public_url`` = the relay's address (its Host guard then accepts it), and Harbor's main container
joins the network through an extra compose file (``--sandbox-option extra_docker_compose=[...]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandboxes.forwarder import READY_LINE
from sandboxes.harbor_images import in_podman

RELAY_IMAGE = "debian:bookworm-slim"  # python3 inside (docker/setup-daemon.sh)
FORWARDER = Path(__file__).resolve().parents[1] / "sandboxes" / "forwarder.py"
PORT = 8000


@dataclass
class RemoteNetwork:
    name: str
    public_url: str  # the gateway's address on the network: give it to serve --public-url
    compose_file: Path  # joins Harbor's main service to the network
    gateway_port: list[int] = field(default_factory=list)  # set once the gateway listens

    def options(self) -> dict:
        return {"extra_docker_compose": [str(self.compose_file)]}


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True, timeout=120).stdout.strip()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


def _serve_relay(socket_path: Path, network: RemoteNetwork, stop: threading.Event) -> None:
    async def connection(reader, writer) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", network.gateway_port[0])
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    async def main() -> None:
        server = await asyncio.start_unix_server(connection, str(socket_path))
        socket_path.chmod(0o777)
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()

    asyncio.run(main())


@contextlib.contextmanager
def remote_network() -> Iterator[RemoteNetwork]:
    """The network, its relay container and this process's end; all removed after."""
    name = f"harnessrl-remote-{secrets.token_hex(3)}"
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    (folder / "gw").mkdir()
    (folder / "gw").chmod(0o777)
    image = asyncio.run(in_podman(RELAY_IMAGE))
    podman("network", "create", "--internal", name)
    stop = threading.Event()
    relay_thread = None
    try:
        podman(
            "run", "-d", "--name", f"{name}-gw", "--network", name,
            "-v", f"{folder / 'gw'}:/run/gw", "-v", f"{FORWARDER}:/opt/forwarder.py:ro",
            image, "python3", "/opt/forwarder.py", "tcp-to-unix", "--listen", f"0.0.0.0:{PORT}",
            "--socket", "/run/gw/gateway.sock",
        )  # fmt: skip
        _wait_ready(f"{name}-gw")
        address = podman(
            "inspect", f"{name}-gw", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        )
        compose = folder / "network.yaml"
        compose.write_text(json.dumps({
            "services": {"main": {"networks": [name]}},
            "networks": {name: {"external": True, "name": name}},
        }))  # fmt: skip
        network = RemoteNetwork(name, f"http://{address}:{PORT}", compose)
        relay_thread = threading.Thread(target=_serve_relay, args=(folder / "gw" / "gateway.sock", network, stop))
        relay_thread.start()
        yield network
    finally:
        stop.set()
        if relay_thread is not None:
            relay_thread.join(timeout=30)
        subprocess.run(["podman", "rm", "-f", "-t", "0", f"{name}-gw"], capture_output=True, timeout=120)
        subprocess.run(["podman", "network", "rm", "-f", name], capture_output=True, timeout=120)


def _wait_ready(container: str) -> None:
    for _ in range(600):
        if READY_LINE in subprocess.run(["podman", "logs", container], capture_output=True, text=True).stdout:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the relay {container} never listened: {podman('logs', container)}")
