"""An attacking agent in a task image with no python3, behind the two new routes to the gateway:
the docker forwarder sidecar (the sandbox shares its network namespace) and the local forwarder that
runs outside bubblewrap. Through either, the agent's own model endpoint answers; the control plane,
another rollout's endpoints and every other address are refused or unreachable; the gateway socket is
not in the sandbox, and the forwarder is neither visible nor killable from inside."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator

import pytest

from harnesses.environments import Environments, ImageConfig
from sandboxes import SandboxSpec, create_sandbox

IMAGE = "harnessrl-test/no-python:1"
DOCKERFILE = "FROM debian:bookworm-slim\nRUN rm -rf /usr/bin/python3* /usr/lib/python3*\nWORKDIR /app\n"
TOKEN = "hrl-mine"
# bash's /dev/tcp: the image has no curl and no python. Prints the status line of each request.
REQUEST = (
    'exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7; printf "GET {path} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}'
    '\\r\\nConnection: close\\r\\n\\r\\n" >&3; head -n 1 <&3'
)


@pytest.fixture(scope="module")
def no_python_image(tmp_path_factory) -> str:
    context = tmp_path_factory.mktemp("nopy")
    (context / "Dockerfile").write_text(DOCKERFILE)
    subprocess.run(["docker", "build", "-q", "-t", IMAGE, str(context)], check=True, capture_output=True)
    return IMAGE


@pytest.fixture
async def gateway_port() -> AsyncIterator[int]:
    async def handle(reader, writer):
        line = (await reader.readline()).decode().strip()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        body = f"gateway saw {line}".encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def sandbox_for(kind: str, image: str, port: int):
    spec = SandboxSpec(gateway_url=f"http://127.0.0.1:{port}/r/{TOKEN}/v1", workdir="/app")
    if kind == "docker":
        return await create_sandbox(
            "docker", SandboxSpec(**{**spec.__dict__, "image": image, "forwarder_image": "debian:bookworm-slim"})
        )
    import docker

    found = docker.from_env().images.get(image)
    root = await Environments().rootfs(ImageConfig(image, found.id, "/app", {}))
    return await create_sandbox("local", SandboxSpec(**{**spec.__dict__, "root": str(root)}), isolation="bwrap")


@pytest.mark.parametrize("kind", ["docker", "local"])
async def test_an_agent_in_a_task_image_reaches_only_its_own_model_endpoints(kind, no_python_image, gateway_port):
    async with await sandbox_for(kind, no_python_image, gateway_port) as sandbox:
        port = gateway_port

        async def status(path: str) -> str:
            result = await sandbox.exec(["bash", "-c", REQUEST.format(port=port, path=path)], timeout_s=30)
            return result.text().strip()

        assert (await sandbox.exec("command -v python3", timeout_s=60)).exit_code != 0
        assert "200" in await status(f"/r/{TOKEN}/v1/models")
        for path in ("/admin/policy", "/api/rollouts", "/r/hrl-other/v1/models", f"/r/{TOKEN}/v1/../../admin"):
            assert "403" in await status(path), path
        gone = await sandbox.exec("ls /run/harnessrl/gw/gateway.sock", timeout_s=60)
        assert gone.exit_code != 0  # the socket lives with the forwarder, not in the sandbox
        seen = await sandbox.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '", timeout_s=60)
        assert b"forwarder" not in seen.stdout  # another pid namespace: nothing to kill or replace
        outside = await sandbox.exec(["bash", "-c", "exec 3<>/dev/tcp/1.1.1.1/80 && echo connected"], timeout_s=30)
        assert b"connected" not in outside.stdout
        assert "200" in await status(f"/r/{TOKEN}/v1/models")  # the route survived the attempts


@pytest.mark.parametrize("kind", ["docker", "local"])
async def test_a_task_allowed_the_internet_gets_the_hosts_network_only_when_the_run_allows_it(
    kind, no_python_image, gateway_port, tmp_path
):
    from harnesses.environments import TaskEnvironmentError
    from harnesses.task import load_harbor

    folder = tmp_path / "online"
    for sub in ("environment", "tests"):
        (folder / sub).mkdir(parents=True)
    (folder / "instruction.md").write_text("x\n")
    (folder / "task.toml").write_text(f'[environment]\ndocker_image = "{no_python_image}"\nallow_internet = true\n')
    task = load_harbor(folder)
    with pytest.raises(TaskEnvironmentError, match="--allow-internet"):
        await Environments().sandbox_spec(task, "builtin", kind, SandboxSpec())
    spec = await Environments(allow_internet=True).sandbox_spec(task, "builtin", kind, SandboxSpec())
    assert spec.internet and spec.workdir == "/app"
    options = {"isolation": "bwrap"} if kind == "local" else {}
    async with await create_sandbox(kind, spec, **options) as sandbox:  # a host port: the host's network
        result = await sandbox.exec(["bash", "-c", REQUEST.format(port=gateway_port, path="/anything")], timeout_s=30)
        assert "200" in result.text(), result.text()
