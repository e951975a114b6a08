"""The local backend: bubblewrap when present, a plain subprocess otherwise.

Each sandbox owns a private host directory (mode 0700) holding its workspace, /tmp, home and extra
writable dirs, which persist across execs.

- `bwrap` (isolated): every exec is one bubblewrap run with the layout of `sandboxes.bwrap` (read-only
  system dirs, private writable dirs, no network). The gateway is reached through a unix socket in the
  sandbox's directory: the host serves it with `forwarder.HostBridge`, and inside the exec runs under
  `forwarder.py tcp-to-unix`, which listens on 127.0.0.1:PORT for the agent. Processes an exec leaves
  in the background die with it (own pid namespace).
  With `spec.root` (a Harbor task's exported image) the workspace is `spec.workspace` (the image's
  WORKDIR), first filled with the root's content there; mount points the root lacks are made in it;
  and since the image may have no python3, the forwarder runs outside: `unshare --net` makes the
  exec's network namespace, the host's python runs the forwarder there (loopback brought up) and
  bubblewrap joins it, so the agent sees neither the socket nor the forwarder's process.
- `subprocess` (UNISOLATED): the command runs as this user in the host's file system and network,
  with the workspace as cwd and an explicit minimal environment; only limits and the process-group
  kill apply, and the gateway URL is passed unchanged. Only when asked for by name (never a silent
  fallback), with a warning: for trusted agents on machines without bubblewrap. Its `writable_dirs`
  (/logs, /tests) are still its own: bound over the host's paths in a private mount namespace
  (`unshare`, which needs root), so concurrent sandboxes never share a verifier's folders.

The verifier (`exec_verifier`) sees the same paths, but $HOME is bound to a new, empty host dir and
its environment is `verifier_env` alone (with our sitecustomize.py); /usr, /etc and a root are read-only.
`copy_workspace_to` copies the workspace host dir to another local sandbox's (links as links), where
`refuse_outside_links` reads its links with lstat and readlink and judges them by the inside paths.

Limits: `sandboxes.limits` (cgroup, else rlimit); timeouts and the wall time SIGKILL the whole
process group (and every process left in the cgroup at wall time).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from sandboxes import bwrap
from sandboxes.bridge import HostBridge
from sandboxes.execs import finished_exec, in_workspace, shell_exit_code, start_exec
from sandboxes.host_tree import copy_tree, prepare_root, recreate, replace_tree, write_file
from sandboxes.isolation import check_private_mounts, resolve_isolation
from sandboxes.limits import ProcessLimits
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
from sandboxes.workspace_links import Link, refuse_host_links

MAX_OUTPUT = 16 * 1024 * 1024  # bytes kept per stream; the rest is drained and dropped
KILL_GRACE_S = 2.0  # after a kill, how long to wait for the pipes to close before giving up on them
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FORWARDER = Path(__file__).with_name("forwarder.py")


class LocalSandbox:
    def __init__(self, spec: SandboxSpec, isolation: str) -> None:
        self.spec, self.isolation = spec, isolation
        self.id = f"{spec.name or 'sbx'}-{secrets.token_hex(4)}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"harnessrl-{self.id}-"))  # mkdtemp: mode 0700
        self.limits = ProcessLimits.create(self.id, spec.limits)
        self._bridge: HostBridge | None = None
        self._running: set[asyncio.subprocess.Process] = set()
        self._deadline = time.monotonic() + spec.limits.wall_time_s if spec.limits.wall_time_s else None
        self._watchdog: asyncio.TimerHandle | None = None
        self._expired = self._closed = False
        self.layout = self._make_layout()

    @classmethod
    async def create(cls, spec: SandboxSpec, isolation: str = "auto", allow_unisolated: bool = False) -> LocalSandbox:
        """isolation: "bwrap", "subprocess" (unisolated, on purpose), or "auto": bubblewrap, and
        without it an error unless `allow_unisolated`."""
        isolation = resolve_isolation(isolation, allow_unisolated)
        if spec.root is not None and isolation != "bwrap":
            raise SandboxError("spec.root needs bubblewrap: apt-get install -y bubblewrap")
        if isolation == "subprocess":
            check_private_mounts(spec.writable_dirs)
        for rel in spec.files:
            confined_path(rel)
        if spec.gateway_url:
            gateway_target(spec.gateway_url)  # a malformed URL fails here, with the fix in its message
        sandbox = cls(spec, isolation)
        try:
            await sandbox._start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _make_layout(self) -> bwrap.Layout:
        inside = [self.spec.workspace, "/tmp", bwrap.HOME, *self.spec.writable_dirs]
        binds = {path: self.dir / path.strip("/").replace("/", "_") for path in inside}
        for host in binds.values():
            host.mkdir(mode=0o755)
        (self.dir / "tmp").chmod(0o1777)
        if self.spec.root is not None:
            prepare_root(self.spec.root, [*binds, *self.spec.ro_binds])
            copy_tree(Path(self.spec.root) / self.spec.workspace.lstrip("/"), binds[self.spec.workspace])
        routed = bool(self.spec.gateway_url) and not self.spec.internet
        self.socket_dir = self.dir / "gw" if routed else None
        # A root (a task's image) may have no python3: the forwarder then runs outside the sandbox, with
        # the host's python, in a network namespace of its own that bubblewrap joins (`_outside`).
        self._forward_outside = routed and self.spec.root is not None
        return bwrap.Layout(
            root=self.spec.root,
            binds=binds,
            ro_binds=self.spec.ro_binds,
            socket_dir=None if self._forward_outside else self.socket_dir,
            forwarder=FORWARDER,
            share_net=self.spec.internet or self._forward_outside,
        )

    async def _start(self) -> None:
        for rel, data in self.spec.files.items():
            await self.put_file(rel, data)
        if self.spec.gateway_url and self.isolation == "bwrap" and not self.spec.internet:
            self.socket_dir.mkdir(mode=0o755)
            route = Route.for_gateway(self.spec.gateway_url, self.spec.gateway_port_inside)
            self._bridge = await HostBridge(str(self.socket_dir / "gateway.sock"), route).start()
        if self._deadline is not None:
            delay = self._deadline - time.monotonic()
            self._watchdog = asyncio.get_running_loop().call_later(delay, self._expire)

    # -- Sandbox protocol -------------------------------------------------------------------------

    @property
    def workspace(self) -> str:
        return self.spec.workspace if self.isolation == "bwrap" else str(self.layout.binds[self.spec.workspace])

    @property
    def gateway_url_inside(self) -> str | None:
        if self.spec.gateway_url is None or self.isolation != "bwrap" or self.spec.internet:
            return self.spec.gateway_url  # unisolated: the host's network, the URL as is
        return inside_url(self.spec.gateway_url, self.spec.gateway_port_inside)

    async def exec(
        self,
        command: str | list[str],
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        return await self._run(command, timeout_s, self._env(env), cwd, self.layout)

    async def exec_verifier(
        self, command: str | list[str], timeout_s: float | None = None, env: Mapping[str, str] | None = None
    ) -> ExecResult:
        # The same path inside ($HOME) bound to a new, empty host dir: the agent's home is out of sight.
        home, site = self.dir / "verifier_home", self.dir / "verifier_python"  # site: read-only inside
        await asyncio.to_thread(recreate, home)
        await asyncio.to_thread(write_file, site / SITECUSTOMIZE, verifier_site(), 0o644)
        layout = bwrap.verifier_layout(self.layout, home, site)
        isolated = (bwrap.HOME, "/tmp", bwrap.VERIFIER_PYTHON)
        paths = isolated if self.isolation == "bwrap" else (home, self.dir / "tmp", site)
        inside_home, tmp, python = map(str, paths)
        full_env = verifier_env({"TMPDIR": tmp, **self.spec.env, **(env or {})}, inside_home, self.workspace, python)
        return await self._run(command, timeout_s, full_env, None, layout)

    async def copy_workspace_to(self, other: Sandbox) -> None:
        if not isinstance(other, LocalSandbox):
            raise SandboxError(f"copy_workspace_to: {other.id} is not a local sandbox (grade in the same backend)")
        await asyncio.to_thread(self._stop_all)
        source, target = self.layout.binds[self.spec.workspace], other.layout.binds[other.spec.workspace]
        await asyncio.to_thread(replace_tree, source, target)

    async def refuse_outside_links(self) -> list[Link]:
        await asyncio.to_thread(self._stop_all)
        return await asyncio.to_thread(refuse_host_links, self.layout.binds[self.spec.workspace], self.workspace)

    async def _run(
        self,
        command: str | list[str],
        timeout_s: float | None,
        full_env: dict[str, str],
        cwd: str | None,
        layout: bwrap.Layout,
    ) -> ExecResult:
        start = start_exec(self.id, self._closed, command, timeout_s, self._deadline, self._expired)
        if isinstance(start, ExecResult):
            return start
        inside_cwd = os.path.join(self.workspace, cwd) if cwd else self.workspace
        argv = self._command(start.argv, full_env, inside_cwd, layout)
        oom_before = self.limits.oom_kills()
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # own group: killed as one
                env=full_env if self.isolation == "subprocess" else {"PATH": HOST_PATH},
                cwd=str(self._host_cwd(cwd)) if self.isolation == "subprocess" else None,
            )
        except OSError as exc:  # no such program or cwd: a failing command, as a shell reports it
            return ExecResult(127, b"", f"{exc}\n".encode(), False, time.monotonic() - started)
        self._running.add(proc)
        try:
            stdout, stderr, timed_out = await _collect(proc, start.limit_s)
        finally:
            self._running.discard(proc)
        code, oom = shell_exit_code(proc.returncode), self.limits.oom_kills() > oom_before
        duration = time.monotonic() - started
        return finished_exec(start, code, stdout, stderr, timed_out, duration, oom, self._expired)

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = self._host_file(path, writing=True)
        await asyncio.to_thread(write_file, target, data, mode)

    async def get_file(self, path: str) -> bytes:
        target = self._host_file(path, writing=False)
        if target is None:  # e.g. a file of the read-only root: read it from inside
            result = await self.exec(["cat", "--", path], timeout_s=60)
            if result.exit_code != 0:
                raise FileNotFoundError(f"{path} in sandbox {self.id}: {result.text().strip()}")
            return result.stdout
        return await asyncio.to_thread(target.read_bytes)

    async def fresh_dirs(self, *paths: str) -> None:
        await asyncio.to_thread(self._stop_all)
        for path in paths:
            await asyncio.to_thread(recreate, self._private_dir(path))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._kill_running()
        await asyncio.to_thread(self.limits.close)
        if self._bridge is not None:
            await self._bridge.close()
        await asyncio.to_thread(shutil.rmtree, self.dir, True)

    async def __aenter__(self) -> LocalSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers ----------------------------------------------------------------------------------

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        home = bwrap.HOME if self.isolation == "bwrap" else str(self.layout.binds[bwrap.HOME])
        tmp = "/tmp" if self.isolation == "bwrap" else str(self.layout.binds["/tmp"])
        base = {"PATH": HOST_PATH, "HOME": home, "TMPDIR": tmp, "LANG": "C.UTF-8"}
        if self.gateway_url_inside:
            base["HARNESSRL_GATEWAY_URL"] = self.gateway_url_inside
        return {**base, **self.spec.env, **(env or {})}

    def _command(self, argv: list[str], env: dict[str, str], cwd: str, layout: bwrap.Layout) -> list[str]:
        if self.isolation == "subprocess":
            return self.limits.wrap(self._private_mounts(argv))
        listen = ["tcp-to-unix", "--listen", f"127.0.0.1:{urlsplit(self.gateway_url_inside or '').port}"]
        if self._bridge is not None and self._forward_outside:
            return self.limits.wrap(self._outside(listen, bwrap.command(layout, argv, env, cwd)))
        if self._bridge is not None:
            argv = [
                "python3",
                bwrap.FORWARDER_INSIDE,
                *listen,
                "--socket",
                f"{bwrap.SOCKET_DIR_INSIDE}/gateway.sock",
                "--",
                *argv,
            ]
        return self.limits.wrap(bwrap.command(layout, argv, env, cwd))

    def _outside(self, listen: list[str], sandboxed: list[str]) -> list[str]:
        """A new network namespace holding the forwarder (host python, outside the sandbox's mounts and
        pids: the agent can neither replace it nor reach its socket) and bubblewrap sharing it."""
        unshare = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--net"]
        return [
            *unshare,
            "--",
            sys.executable,
            str(FORWARDER),
            *listen,
            "--loopback-up",
            "--socket",
            str(self.socket_dir / "gateway.sock"),
            "--",
            *sandboxed,
        ]

    def _host_cwd(self, cwd: str | None) -> Path:
        workspace = self.layout.binds[self.spec.workspace]
        return workspace if cwd is None else workspace / cwd

    def _private_mounts(self, argv: list[str]) -> list[str]:
        """Unisolated: argv in a private mount namespace where writable_dirs are this sandbox's own."""
        dirs = self.spec.writable_dirs
        if not dirs:
            return argv
        binds = " && ".join(f'mount --bind "${i}" {shlex.quote(d)}' for i, d in enumerate(dirs, 1))
        script = f'{binds} && shift {len(dirs)} && exec "$@"'
        hosts = [str(self.layout.binds[d]) for d in dirs]
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", *hosts, *argv]

    def _private_dir(self, path: str) -> Path:
        """The host dir behind a writable dir, or a folder right under one (see `fresh_dirs`)."""
        path = posixpath.normpath(path)
        parent = posixpath.dirname(path)
        for mount in self.spec.writable_dirs:
            if path == mount:
                return self.layout.binds[mount]
            if parent == mount:
                return self.layout.binds[mount] / posixpath.basename(path)
        raise SandboxError(
            f"{path} is not one of the sandbox's writable dirs {self.spec.writable_dirs} or a folder right under one"
        )

    def _host_file(self, path: str, writing: bool) -> Path | None:
        if self.isolation == "subprocess":
            if not path.startswith("/"):
                return self.layout.binds[self.spec.workspace] / confined_path(path)
            host = self.layout.host_path(posixpath.normpath(path))
            mine = any(path == d or path.startswith(d + "/") for d in self.spec.writable_dirs)
            return host if mine and host is not None else Path(path)  # other absolute paths: the host's
        inside = in_workspace(self.spec.workspace, path)
        host = self.layout.host_path(os.path.normpath(inside))
        if host is not None and not self._stays_inside(host):
            host = None  # a symlink the agent made points elsewhere: never follow it on the host
        if host is None and writing:
            writable = ", ".join(self.layout.binds)
            raise SandboxError(
                f"{path} is read-only in sandbox {self.id}: write under {writable} "
                "(or add its directory to SandboxSpec.writable_dirs)"
            )
        return host

    def _stays_inside(self, host: Path) -> bool:
        """Whether host, symlinks resolved, is still within one of the sandbox's own dirs."""
        real = Path(os.path.realpath(host))
        return any(real.is_relative_to(os.path.realpath(d)) for d in self.layout.binds.values())

    def _stop_all(self) -> None:
        """Every process of this sandbox killed: the execs' groups, and what left them (the cgroup)."""
        self._kill_running()
        self.limits.kill_all()

    def _kill_running(self) -> None:
        for proc in list(self._running):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def _expire(self) -> None:
        """Wall time is up: kill everything, including processes that left their group."""
        self._expired = True
        self._kill_running()
        self.limits.kill_all()


async def _collect(proc: asyncio.subprocess.Process, limit: float | None) -> tuple[bytes, bytes, bool]:
    """Read both pipes until exit or `limit` seconds; on expiry SIGKILL the process group."""
    buffers = (bytearray(), bytearray())
    readers = [asyncio.ensure_future(_drain(s, b)) for s, b in zip((proc.stdout, proc.stderr), buffers)]
    waiter = asyncio.ensure_future(proc.wait())
    done, _ = await asyncio.wait({waiter}, timeout=limit)
    timed_out = not done
    if timed_out:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await waiter
    # A process that escaped the group may hold the pipes open: wait a little, then stop reading.
    _, pending = await asyncio.wait(readers, timeout=KILL_GRACE_S)
    for task in pending:
        task.cancel()
    return bytes(buffers[0]), bytes(buffers[1]), timed_out


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(65536):
        if len(into) < MAX_OUTPUT:
            into += chunk[: MAX_OUTPUT - len(into)]
