"""Isolation of real sandboxes: a docker container on a real dockerd, and bubblewrap.

From inside, the agent reaches the gateway (a stand-in HTTP server on the host's loopback) through
the forwarded URL and nothing else, sees no host files outside its own directories, and is killed at
its memory limit (reported as "oom") and at its wall time. CI starts the engine and builds the base
image with docker/setup-daemon.sh before the tests; elsewhere the docker half skips, saying so.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from harnesses.grading.verify import verify
from harnesses.task import builtin_tasks_path, load_tasks
from sandboxes import Limits, SandboxSpec, create_sandbox
from sandboxes.docker import DockerSandbox
from tests.integration.backends import BACKENDS, BASE_IMAGE, DOCKER_SKIP, backend_spec, create_backend

MiB = 1024 * 1024

PROBE = """
import json, socket, sys
results = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        results[target] = "connected"
    except OSError as exc:
        results[target] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(results))
"""

FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())"


async def _http_server(host: str, name: str) -> tuple[asyncio.AbstractServer, int]:
    """A tiny HTTP server answering `<name> saw <request line>`."""

    async def handle(reader, writer):
        request_line = (await reader.readline()).decode().strip()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        body = f"{name} saw {request_line}".encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host, 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
async def servers() -> AsyncIterator[dict[str, int]]:
    """The stand-in gateway on 127.0.0.1, and another server on every host address."""
    gateway, gateway_port = await _http_server("127.0.0.1", "gateway")
    other, other_port = await _http_server("0.0.0.0", "other")
    try:
        yield {"gateway": gateway_port, "other": other_port}
    finally:
        gateway.close()
        other.close()


def _host_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses (where the other server also listens)."""
    addresses = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addresses.add(info[4][0])
    except OSError:
        pass
    try:  # the source address of the default route; a UDP connect sends nothing
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("1.1.1.1", 80))
            addresses.add(probe.getsockname()[0])
    except OSError:
        pass
    return sorted(a for a in addresses if not a.startswith("127."))


_spec, _create = backend_spec, create_backend


@pytest.mark.parametrize("backend", BACKENDS)
async def test_only_the_gateway_is_reachable(backend, servers):
    gateway_url = f"http://127.0.0.1:{servers['gateway']}/r/hrl-token/v1"
    async with await _create(backend, _spec(backend, gateway_url=gateway_url)) as sb:
        inside = sb.gateway_url_inside
        assert inside.startswith("http://127.0.0.1:") and inside.endswith("/r/hrl-token/v1")
        fetched = await sb.exec(["python3", "-c", FETCH, inside + "/models"], timeout_s=30)
        assert fetched.ok, fetched.text()
        assert fetched.stdout.decode().strip() == "gateway saw GET /r/hrl-token/v1/models HTTP/1.1"

        for address in _host_addresses():  # the negative checks below mean something: the host can
            socket.create_connection((address, servers["other"]), timeout=3).close()
        targets = [
            f"127.0.0.1:{servers['other']}",
            "1.1.1.1:80",
            "8.8.8.8:53",
            "172.17.0.1:80",
            "10.0.0.1:80",
            *[f"{a}:{servers['other']}" for a in _host_addresses()],
        ]
        probe = await sb.exec(["python3", "-c", PROBE, *targets], timeout_s=60)
        assert probe.ok, probe.text()
        results = json.loads(probe.stdout)
        print(backend, results)
        assert not [t for t, outcome in results.items() if outcome == "connected"], results

        interfaces = await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", timeout_s=60)
        assert interfaces.stdout.split() == [b"lo"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_host_files_outside_the_workspace_are_invisible(backend):
    secret_dir = Path(tempfile.mkdtemp(prefix="harnessrl-host-secret-"))
    (secret_dir / "secret.txt").write_text("host secret")
    repo = Path(__file__).resolve().parents[2]
    try:
        async with await _create(backend, _spec(backend, files={"mine.txt": b"mine"})) as sb:
            assert (await sb.exec("cat mine.txt", timeout_s=60)).stdout == b"mine"
            for path in (
                secret_dir / "secret.txt",
                secret_dir,
                repo / "pyproject.toml",
                Path("/root/.bash_history"),
                Path("/var/log/harnessrl-dockerd.log"),
                Path("/run/docker.sock"),
            ):
                seen = await sb.exec(["test", "-e", str(path)], timeout_s=60)
                assert seen.exit_code == 1, f"{path} is visible inside the {backend} sandbox"
            assert (await sb.exec(["cat", str(secret_dir / "secret.txt")], timeout_s=60)).stdout == b""
            tmp = await sb.exec("ls -A /tmp", timeout_s=60)
            assert secret_dir.name.encode() not in tmp.stdout
    finally:
        shutil.rmtree(secret_dir)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_killed_at_the_memory_limit(backend):
    limits = Limits(memory_bytes=96 * MiB, cpus=1.0)
    async with await _create(backend, _spec(backend, limits=limits)) as sb:
        small = await sb.exec(["python3", "-c", "x = bytearray(16 << 20); print(len(x))"], timeout_s=60)
        assert small.ok, small.text()
        big = await sb.exec(["python3", "-c", "x = bytearray(512 << 20); print('survived')"], timeout_s=60)
        assert big.killed_reason == "oom", big
        assert big.exit_code == 137 and b"survived" not in big.stdout
        assert (await sb.exec("echo alive", timeout_s=60)).stdout == b"alive\n"  # the sandbox lives on


@pytest.mark.parametrize("backend", BACKENDS)
async def test_killed_at_the_wall_time(backend):
    async with await _create(backend, _spec(backend, limits=Limits(wall_time_s=3.0))) as sb:
        assert (await sb.exec("echo early", timeout_s=60)).stdout == b"early\n"
        result = await sb.exec("sleep 60 & sleep 60", timeout_s=120)
        assert result.killed_reason == "wall_time" and result.timed_out, result
        assert result.duration_s < 50  # killed: well before the 60 s sleeps end, however busy the machine
        after = await sb.exec("echo late", timeout_s=60)
        assert after.killed_reason == "wall_time" and after.stdout == b""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_exec_timeout_and_verifier_files(backend):
    async with await _create(backend, _spec(backend, files={"answer.txt": b"42\n"})) as sb:
        slow = await sb.exec("sleep 60; echo never", timeout_s=1)
        assert slow.timed_out and slow.killed_reason == "timeout" and slow.duration_s < 50  # not the 60 s
        # Harbor-style: tests are uploaded after the agent ran, the verifier writes /logs/verifier.
        test_sh = (
            b'#!/bin/sh\nmkdir -p /logs/verifier\n[ "$(cat /workspace/answer.txt)" = 42 ] && '
            b"echo 1 > /logs/verifier/reward.txt\n"
        )
        await sb.put_file("/tests/test.sh", test_sh, mode=0o755)
        verified = await sb.exec(["/tests/test.sh"], timeout_s=30)
        assert verified.ok, verified.text()
        assert await sb.get_file("/logs/verifier/reward.txt") == b"1\n"


LEFTOVER = (
    "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && echo fake > /tests/test.sh && "
    "(setsid sh -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "sleep 0.01; done' >/dev/null 2>&1 &)"
)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_verifier_counts_only_what_it_wrote_itself(backend):
    """An agent that plants a reward, a fake test and a process that keeps writing the reward gets
    the real verifier's reward (0: it did not solve the task)."""
    [task] = [t for t in load_tasks(builtin_tasks_path()) if t.name == "harbor-gcd"]
    async with await _create(backend, _spec(backend, files=task.files)) as sb:
        planted = await sb.exec(LEFTOVER, timeout_s=30)
        assert planted.ok, planted.text()
        verdict = await verify(sb, task)
        assert (verdict.reward, verdict.error) == (0.0, None), verdict.output
        assert await sb.get_file("/logs/verifier/reward.txt") == b"0\n"
        assert await sb.get_file("/tests/test.sh") == task.tests["test.sh"]


@pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
async def test_docker_sandboxes_run_concurrently(servers):
    """An exec holds an SDK thread for its whole run: 16 one-second execs must overlap, not queue
    (asyncio's default pool has min(32, cores + 4) threads: 6 here, so the 7th would wait)."""
    spec = SandboxSpec(image=BASE_IMAGE, gateway_url=f"http://127.0.0.1:{servers['gateway']}/r/t/v1")
    boxes = await asyncio.gather(*(create_sandbox("docker", spec) for _ in range(4)))
    # Each exec prints when its sleep began and ended (containers share the host's clock): when all 16
    # overlap, the last to begin began before the first to end ended, however slow the machine is.
    code = "import time; print(time.time()); time.sleep(1); print(time.time()); " + FETCH
    try:
        results = await asyncio.gather(
            *(
                sb.exec(["python3", "-c", code, sb.gateway_url_inside + "/models"], timeout_s=60)
                for sb in boxes
                for _ in range(4)
            )
        )
        assert all(r.ok and b"gateway saw GET /r/t/v1/models" in r.stdout for r in results), results
        spans = [tuple(float(x) for x in r.stdout.split(b"\n")[:2]) for r in results]
        assert max(begin for begin, _ in spans) < min(end for _, end in spans), spans
    finally:
        await asyncio.gather(*(sb.close() for sb in boxes))


@pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
async def test_docker_sandbox_leaves_no_container():
    import docker

    client = docker.from_env()
    networks_before = {n.id for n in client.networks.list()}
    sb = await create_sandbox("docker", SandboxSpec(image=BASE_IMAGE, limits=Limits(cpus=0.5, pids=64)))
    container = client.containers.get(sb.container_id)
    host_config = container.attrs["HostConfig"]
    assert host_config["NetworkMode"] == "none" and host_config["NanoCpus"] == 500_000_000
    assert host_config["PidsLimit"] == 64
    await sb.close()
    assert not client.containers.list(all=True, filters={"label": f"harnessrl.sandbox={sb.id}"}, ignore_removed=True)
    assert {n.id for n in client.networks.list()} == networks_before  # no network was created


class HeldCreates:
    """The real engine's client, whose container creates return only once the test lets them: a cancel
    (Ctrl-C, SIGTERM) then lands while the engine creates the sandbox's container."""

    def __init__(self, client) -> None:
        self.api, self._client = client.api, client
        self.containers = SimpleNamespace(create=self._create)
        self.created, self.release = threading.Event(), threading.Event()

    def _create(self, *args, **kwargs):
        container = self._client.containers.create(*args, **kwargs)
        self.created.set()
        self.release.wait(timeout=600)
        return container


@pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
async def test_a_sandbox_cancelled_while_its_container_is_created_leaves_no_container():
    import docker

    client = docker.from_env()
    held = HeldCreates(client)
    creating = asyncio.create_task(DockerSandbox.create(SandboxSpec(image=BASE_IMAGE, name="cancelled-create"), held))
    assert await asyncio.to_thread(held.created.wait, 600), "the engine never created the container"
    creating.cancel()
    held.release.set()
    with pytest.raises(asyncio.CancelledError):
        await creating
    left = client.containers.list(all=True, filters={"name": "harnessrl-cancelled-create-"}, ignore_removed=True)
    assert [c.name for c in left] == []
