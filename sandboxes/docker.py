"""The docker backend: one container per sandbox, through the docker SDK.

The container has no network (`network_mode="none"`, only loopback). Its PID 1 is the forwarder
(`forwarder.py tcp-to-unix`, copied in before start), listening on 127.0.0.1:PORT and forwarding to a
unix socket in a host directory bind-mounted at /run/harnessrl/gw; on the host, `HostBridge` carries
that socket to the gateway. So the agent uses `http://127.0.0.1:PORT/r/<token>/v1` and can reach
nothing else. No bridge network is ever created. The bind mount needs the engine on this host (a
remote DOCKER_HOST cannot see our socket).

With `spec.forwarder_image` (Harbor task images, which may have no python3) the forwarder runs in a
sidecar container of that image instead, holding the socket mount, and the sandbox joins its network
namespace (`network_mode="container:<sidecar>"`): the same 127.0.0.1:PORT, nothing needed in the
sandbox's image, and neither the socket nor the forwarder's processes visible from it. With
`spec.internet` (a task that needs it, allowed by the run) the container gets the host's network and
the gateway URL unchanged. The workspace is `spec.workspace` (a task image's WORKDIR).

The verifier (`exec_verifier`) runs under `env -i` with `verifier_env` (a new home under /tmp, our
sitecustomize.py beside it, none of the container's environment); the agent is root in its container,
so only a fresh container (`copy_workspace_to` one made from the task's image) leaves the files it
changed elsewhere behind.

Limits: `mem_limit` (= memswap, no swap), `nano_cpus`, `pids_limit`; exec timeouts through GNU
`timeout -s KILL` inside (kills the exec's process group); wall time kills the container. OOM kills
are read from the engine's `oom` events and `State.OOMKilled`.

The SDK blocks: its calls run in a thread pool of their own (`sandboxes.docker_daemon`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import re
import secrets
import shlex
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import docker.errors

import docker
from sandboxes.bridge import HostBridge
from sandboxes.docker_daemon import OomKills, call, created, default_client, save_archive, tar_of
from sandboxes.execs import (
    clean_env_argv,
    exec_env,
    finished_exec,
    in_workspace,
    killed_at,
    start_exec,
    verifier_paths,
)
from sandboxes.forwarder import READY_LINE
from sandboxes.protocol import (
    SITECUSTOMIZE,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxSpec,
    confined_path,
    verifier_env,
    verifier_site,
)
from sandboxes.route import Route
from sandboxes.urls import gateway_target, inside_url
from sandboxes.workspace_links import Link, refuse_inside

RUN_DIR = "/run/harnessrl"
SOCKET_DIR_INSIDE = f"{RUN_DIR}/gw"
FORWARDER_INSIDE = "/opt/harnessrl/forwarder.py"
LABEL = "harnessrl.sandbox"
READY_TIMEOUT_S = 20.0
STUCK_GRACE_S = 10.0  # past an exec's timeout, how long before we kill every exec of the container

KILL_ALL = (  # every process but PID 1 (init), this shell and the container's command ($1: its pid)
    "for round in 1 2 3 4 5; do for d in /proc/[0-9]*; do p=${d#/proc/}; "
    '[ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = "$1" ] && continue; kill -9 "$p" 2>/dev/null; done; done'
)
MAIN_PID = "cat /proc/1/task/1/children"  # init's one child at start: the forwarder (or sleep)

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


class DockerSandbox:
    def __init__(self, spec: SandboxSpec, client: docker.DockerClient) -> None:
        self.spec, self.client, self.api = spec, client, client.api
        # Container names allow [a-zA-Z0-9_.-] only; task names do not promise that (add-000-3+4).
        self.id = f"{_NAME_UNSAFE.sub('-', spec.name or 'sbx')}-{secrets.token_hex(4)}"
        self.container_id: str | None = None
        self._sidecar_id: str | None = None  # the forwarder's container, with spec.forwarder_image
        self._orphan_ids: list[str] = []  # created while its caller was cancelled: close() removes them too
        self._dir = Path(tempfile.mkdtemp(prefix=f"harnessrl-{self.id}-"))
        self._bridge: HostBridge | None = None
        self._ooms: OomKills | None = None  # once the container exists
        self._main_pid = "1"  # the container's command, spared by `_kill_execs`
        self._deadline = time.monotonic() + spec.limits.wall_time_s if spec.limits.wall_time_s else None
        self._watchdog: asyncio.TimerHandle | None = None
        self._expired = self._closed = False

    @classmethod
    async def create(cls, spec: SandboxSpec, client: docker.DockerClient | None = None) -> DockerSandbox:
        if not spec.image:
            raise SandboxError("a docker sandbox needs SandboxSpec.image (e.g. debian:bookworm-slim)")
        if spec.gateway_url:
            gateway_target(spec.gateway_url)  # a malformed URL fails before any container exists
        client = client or await call(default_client)
        sandbox = cls(spec, client)
        try:
            await sandbox._start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def _start(self) -> None:
        socket_dir = self._dir / "gw"
        socket_dir.mkdir()
        socket_dir.chmod(0o777)  # the container's user may not be root
        if self.spec.gateway_url and not self.spec.internet:
            route = Route.for_gateway(self.spec.gateway_url, self.spec.gateway_port_inside)
            self._bridge = await HostBridge(str(socket_dir / "gateway.sock"), route).start()
            if self.spec.forwarder_image:
                await self._start_sidecar(socket_dir)
        self.container_id = await created(self._orphan_ids, self._create_container, socket_dir)
        self._ooms = OomKills(self.api, self.container_id)
        files = {f"{self.workspace}/{confined_path(rel)}": data for rel, data in self.spec.files.items()}
        if self._bridge is not None and not self.spec.forwarder_image:
            files[FORWARDER_INSIDE] = Path(__file__).with_name("forwarder.py").read_bytes()
        await call(self.api.put_archive, self.container_id, "/", tar_of(files))
        await call(self.api.start, self.container_id)
        if self._bridge is not None and not self.spec.forwarder_image:
            await self._wait_forwarder(self.container_id, self.spec.image)
        self._main_pid = await self._find_main_pid()
        if self._deadline is not None:
            delay = self._deadline - time.monotonic()
            self._watchdog = asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(self._expire()))

    def _forwarder_command(self) -> list[str]:
        port = gateway_target(self.gateway_url_inside)[1]
        return [
            "python3",
            FORWARDER_INSIDE,
            "tcp-to-unix",
            "--listen",
            f"127.0.0.1:{port}",
            "--socket",
            f"{SOCKET_DIR_INSIDE}/gateway.sock",
        ]

    def _network_mode(self) -> str:
        """none (loopback only), the sidecar's namespace, or the host's network (internet)."""
        if self.spec.internet:
            return "host"
        return f"container:{self._sidecar_id}" if self._sidecar_id else "none"

    async def _start_sidecar(self, socket_dir: Path) -> None:
        """The forwarder in a container of its own: the sandbox joins its network namespace."""
        self._sidecar_id = await created(self._orphan_ids, self._create_sidecar, socket_dir)
        files = {FORWARDER_INSIDE: Path(__file__).with_name("forwarder.py").read_bytes()}
        await call(self.api.put_archive, self._sidecar_id, "/", tar_of(files))
        await call(self.api.start, self._sidecar_id)
        await self._wait_forwarder(self._sidecar_id, self.spec.forwarder_image)

    def _create_sidecar(self, socket_dir: Path) -> str:
        try:
            container = self.client.containers.create(
                self.spec.forwarder_image,
                command=self._forwarder_command(),
                name=f"harnessrl-{self.id}-gw",
                detach=True,
                network_mode="none",
                init=True,
                labels={LABEL: self.id},
                volumes={str(socket_dir): {"bind": SOCKET_DIR_INSIDE, "mode": "rw"}},
                mem_limit=64 * 2**20,
                pids_limit=64,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"forwarder image {self.spec.forwarder_image!r} not found: run "
                "docker/setup-daemon.sh (it builds debian:bookworm-slim with python3)"
            ) from exc
        return container.id

    def _create_container(self, socket_dir: Path) -> str:
        limits = self.spec.limits
        inside = self._bridge is not None and not self.spec.forwarder_image
        command = self._forwarder_command() if inside else ["sleep", "infinity"]
        volumes = {str(socket_dir): {"bind": SOCKET_DIR_INSIDE, "mode": "rw"}} if inside else {}
        volumes.update({p: {"bind": p, "mode": "ro"} for p in self.spec.ro_binds})
        try:
            container = self.client.containers.create(
                self.spec.image,
                command=command,
                name=f"harnessrl-{self.id}",
                detach=True,
                network_mode=self._network_mode(),
                hostname=None if self._sidecar_id or self.spec.internet else "sandbox",
                working_dir=self.workspace,
                init=True,  # PID 1 reaps the orphans that killed exec process groups leave behind
                environment=self._env({}),
                volumes=volumes,
                labels={LABEL: self.id},
                mem_limit=limits.memory_bytes,
                memswap_limit=limits.memory_bytes,
                nano_cpus=int(limits.cpus * 1e9) if limits.cpus else None,
                pids_limit=limits.pids,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"image {self.spec.image!r} not found: build it (`harnessrl images "
                "build`; the base image: docker/setup-daemon.sh)"
            ) from exc
        return container.id

    async def _wait_forwarder(self, container_id: str, image: str) -> None:
        """PID 1 prints READY_LINE once it listens; an exec before that would find no gateway."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            logs = await call(self.api.logs, container_id, stdout=True, stderr=True)
            if READY_LINE.encode() in logs:
                return
            state = (await call(self.api.inspect_container, container_id))["State"]
            if not state["Running"]:
                raise SandboxError(
                    f"sandbox {self.id}: the gateway forwarder exited ({logs[-500:]!r}); "
                    f"the image {image!r} needs python3 (or set SandboxSpec.forwarder_image)"
                )
            await asyncio.sleep(0.05)
        raise SandboxError(f"sandbox {self.id}: the gateway forwarder did not start in {READY_TIMEOUT_S} s")

    # -- Sandbox protocol -------------------------------------------------------------------------

    @property
    def workspace(self) -> str:
        return self.spec.workspace

    @property
    def gateway_url_inside(self) -> str | None:
        if self.spec.gateway_url is None or self.spec.internet:
            return self.spec.gateway_url  # the host's network: the gateway's own address
        return inside_url(self.spec.gateway_url, self.spec.gateway_port_inside)

    async def exec(
        self,
        command: str | list[str],
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        start = start_exec(self.id, self._closed, command, timeout_s, self._deadline, self._expired)
        if isinstance(start, ExecResult):
            return start
        argv, limit = killed_at(start.argv, start.limit_s), start.limit_s
        started = time.monotonic()
        workdir = in_workspace(self.workspace, cwd)
        run = asyncio.ensure_future(call(self._run_exec, argv, self._env(env or {}), workdir))
        try:
            code, stdout, stderr = await asyncio.wait_for(
                asyncio.shield(run), None if limit is None else limit + STUCK_GRACE_S
            )
        except TimeoutError:
            await self._kill_execs()  # a process left `timeout`'s group and holds the output open
            code, stdout, stderr = await run
        elapsed = time.monotonic() - started
        timed_out = limit is not None and elapsed >= limit and code in (124, 137)
        oom = code != 0 and await self._ooms.since_last(wait=code == 137 and not timed_out)
        return finished_exec(start, code, stdout, stderr, timed_out, elapsed, oom, self._expired)

    async def exec_verifier(
        self, command: str | list[str], timeout_s: float | None = None, env: Mapping[str, str] | None = None
    ) -> ExecResult:
        # A new home under a name the agent could not have guessed (nothing of it runs any more), and
        # `env -i`: the container's own environment (image ENV, spec.env) is not inherited either.
        # Python's sitecustomize.py beside it, written as root: read-only to a verifier of another user.
        home, python = verifier_paths()
        await self._exec_quietly(["mkdir", "-m", "700", "--", home])
        await self.put_file(f"{python}/{SITECUSTOMIZE}", verifier_site())
        variables = verifier_env({**self.spec.env, **(env or {})}, home, self.workspace, python)
        return await self.exec(clean_env_argv(variables, command), timeout_s)

    async def copy_workspace_to(self, other: Sandbox) -> None:
        if not isinstance(other, DockerSandbox):
            raise SandboxError(f"copy_workspace_to: {other.id} is not a docker sandbox (grade in the same backend)")
        await self._kill_execs()
        archive = self._dir / "workspace.tar"
        found = await call(save_archive, self.api, self.container_id, self.workspace, archive)
        await other._replace_workspace(archive if found else None)

    async def refuse_outside_links(self) -> list[Link]:
        await self._kill_execs()
        return await refuse_inside(self.workspace, lambda line: self._exec_quietly(["sh", "-c", line], "root", True))

    async def _replace_workspace(self, archive: Path | None) -> None:
        """The workspace emptied (the image's files there go too), then the archive unpacked over it."""
        if self.workspace == "/":
            raise SandboxError(f"sandbox {self.id}: a workspace of / cannot be replaced; grade in the agent's sandbox")
        quoted = shlex.quote(self.workspace)
        await self._exec_quietly(["/bin/sh", "-c", f"rm -rf -- {quoted} && mkdir -p -- {quoted}"], user="root")
        if archive is not None:
            with archive.open("rb") as file:
                await call(self.api.put_archive, self.container_id, posixpath.dirname(self.workspace), file)

    def _run_exec(self, argv: list[str], env: dict[str, str], workdir: str) -> tuple[int, bytes, bytes]:
        try:
            exec_id = self.api.exec_create(self.container_id, argv, environment=env, workdir=workdir)["Id"]
            stdout, stderr = self.api.exec_start(exec_id, demux=True)
            code = self.api.exec_inspect(exec_id)["ExitCode"]
        except docker.errors.APIError as exc:
            if self._expired or "is not running" in str(exc):
                return 137, b"", f"sandbox {self.id} is not running: {exc}\n".encode()
            raise
        return (137 if code is None else code), stdout or b"", stderr or b""

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = in_workspace(self.workspace, path)
        await call(self.api.put_archive, self.container_id, "/", tar_of({target: data}, mode))

    async def get_file(self, path: str) -> bytes:
        target = in_workspace(self.workspace, path)
        try:
            stream, _ = await call(self.api.get_archive, self.container_id, target)
            raw = await call(b"".join, stream)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"{target} in sandbox {self.id}") from exc
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(f"{target} in sandbox {self.id} is not a regular file")
            return tar.extractfile(member).read()

    async def fresh_dirs(self, *paths: str) -> None:
        await self._kill_execs()
        quoted = " ".join(shlex.quote(p) for p in paths)
        await self._exec_quietly(["/bin/sh", "-c", f"rm -rf -- {quoted} && mkdir -p -- {quoted}"])

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        for container_id in (self.container_id, self._sidecar_id, *self._orphan_ids):
            if container_id is not None:
                with contextlib.suppress(docker.errors.NotFound):
                    await call(self.api.remove_container, container_id, force=True, v=True)
        if self._bridge is not None:
            await self._bridge.close()
        await asyncio.to_thread(shutil.rmtree, self._dir, True)

    async def __aenter__(self) -> DockerSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers ----------------------------------------------------------------------------------

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        return exec_env(self.gateway_url_inside, self.spec.env, env)

    async def _kill_execs(self) -> None:
        """Kill every process but init and the container's command (the forwarder): the last resort
        for a stuck exec, and what the agent left running before the verifier."""
        with contextlib.suppress(docker.errors.APIError):
            await self._exec_quietly(["/bin/sh", "-c", KILL_ALL, "sh", self._main_pid])

    async def _find_main_pid(self) -> str:
        for _ in range(40):
            pids = (await self._exec_quietly(["/bin/sh", "-c", MAIN_PID])).split()
            if pids:
                return pids[0].decode()
            await asyncio.sleep(0.05)
        raise SandboxError(f"sandbox {self.id}: the container's command did not start")

    async def _exec_quietly(self, argv: list[str], user: str = "", check: bool = False) -> bytes:
        """Run a command of ours in the container (as its user, or `user`); its output (and with `check`,
        SandboxError when it fails)."""
        exec_id = (await call(self.api.exec_create, self.container_id, argv, user=user))["Id"]
        output = await call(self.api.exec_start, exec_id) or b""
        if check and (code := (await call(self.api.exec_inspect, exec_id))["ExitCode"]) != 0:
            raise SandboxError(f"sandbox {self.id}: `{shlex.join(argv)[:200]}` failed ({code}): {output[-500:]!r}")
        return output

    async def _expire(self) -> None:
        """Wall time is up: kill the container (every process in it), keep it for inspection."""
        self._expired = True
        with contextlib.suppress(docker.errors.APIError):
            await call(self.api.kill, self.container_id)
