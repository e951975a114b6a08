"""The Harbor backend: a sandbox in any of Harbor's environment types (``--sandbox harbor:<type>``).

Harbor (the harness of Terminal-Bench) drives some forty kinds of environment behind one interface:
podman and docker here, Daytona, Modal, E2B, Runloop, GKE, EC2, ... elsewhere. Each sandbox is one
Harbor environment of the spec's image (Harbor's prebuilt ``docker_image``; for podman copied from
the Docker daemon, ``sandboxes.harbor_images``), run by a worker process in Harbor's own Python
(``sandboxes.harbor_process``). ``--sandbox-option key=value`` pairs are the environment's own options
(Harbor's kwargs: ``extra_docker_compose``, ``keep_containers``, a provider's region, ...).

The route to the gateway: such a sandbox may be on another machine, so it is given the gateway's
public URL (``serve --public-url``) as is, with its rollout token as the only credential; there is
no bridge, and the gateway holds each token to the bridge's caps itself. What the sandbox can reach
besides the gateway is the provider's network policy (docs/security.md).

Exec: Harbor's exec merges stderr into stdout and may allocate a TTY, so each command runs with its
output in two files inside, sent back base64-encoded between markers; GNU ``timeout -s KILL`` bounds
it inside as in the docker backend. The verifier runs under ``env -i`` with ``verifier_env``, and
grading in a fresh sandbox copies the workspace through this host (download, then upload).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import math
import re
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from sandboxes.execs import (
    clean_env_argv,
    exec_env,
    finished_exec,
    in_workspace,
    killed_at,
    start_exec,
    verifier_paths,
)
from sandboxes.harbor_images import REGISTRY_OPTION, in_podman, in_registry
from sandboxes.harbor_process import HarborFailed, HarborProcess
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
from sandboxes.workspace_links import Link, refuse_inside

MARK = "@@harnessrl-exec-9f2c@@"  # between the exec's parts in Harbor's merged output
INLINE_FILE_BYTES = 48 * 1024  # a file this small goes inside its exec's command line (Linux: 128 KiB per argument)
STUCK_GRACE_S = 30.0  # past an exec's limit, how long Harbor's own timeout waits (a provider's round trip)
# Every process but PID 1 and the keep-alive it started (`sh -c "sleep infinity"`: $1, the children PID 1
# had at start), this shell and the exec that started it.
KILL_ALL = (
    "for round in 1 2 3 4 5; do for d in /proc/[0-9]*; do p=${d#/proc/}; "
    '[ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = $PPID ] && continue; '
    'case " $1 " in *" $p "*) continue ;; esac; kill -9 "$p" 2>/dev/null; done; done'
)
KEEP_ALIVE = "cat /proc/1/task/1/children"
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]")
# Harbor's compose-based types keep the environment alive with `sleep infinity` as PID 1, which ignores
# SIGTERM: every stop would wait out compose's 10 s grace. Nothing in it needs one: killed at once.
COMPOSE_TYPES = frozenset({"docker", "podman"})
FAST_STOP = "services:\n  main:\n    stop_grace_period: 0s\n"


def decoded_exec(output: str, code: int) -> tuple[int, bytes, bytes]:
    """The exec's stdout and stderr from Harbor's merged output; the raw output as stderr when the
    markers are missing (the command never ran: the shell or base64 is missing, Harbor timed out)."""
    parts = output.split(MARK)
    try:
        if len(parts) < 4:
            raise binascii.Error("markers missing")
        out, err = (base64.b64decode(re.sub(r"\s", "", part), validate=True) for part in parts[1:3])
    except binascii.Error:
        return (code if code else 127), b"", output.encode()
    return code, out, err


def write_file(target: str, data: bytes, mode: int = 0o644) -> str:
    """A shell command writing ``data`` to ``target`` (its folder made), the bytes inside the command."""
    quoted, folder = shlex.quote(target), shlex.quote(target.rsplit("/", 1)[0] or "/")
    encoded = base64.b64encode(data).decode()
    return f"mkdir -p -- {folder} && printf %s {encoded} | base64 -d > {quoted} && chmod {mode:o} {quoted}"


class HarborSandbox:
    def __init__(self, spec: SandboxSpec, environment_type: str, options: Mapping[str, object]) -> None:
        self.spec, self.environment_type, self.options = spec, environment_type, dict(options)
        self.registry = self.options.pop(REGISTRY_OPTION, None)  # harnessrl's own option: not Harbor's
        # Compose project names allow [a-z0-9_-] only.
        self.id = f"{_NAME_UNSAFE.sub('-', (spec.name or 'sbx').lower())[:40]}-{secrets.token_hex(4)}"
        self._process: HarborProcess | None = None
        self._dir = Path(tempfile.mkdtemp(prefix=f"harnessrl-{self.id}-"))
        self._closed = self._expired = False
        self._deadline = time.monotonic() + spec.limits.wall_time_s if spec.limits.wall_time_s else None
        self._watchdog: asyncio.TimerHandle | None = None
        self._keep_alive = ""  # pids of the environment's own processes besides PID 1
        self._started = False  # Harbor's start returned (a start cut short is stopped by the worker itself)

    @classmethod
    async def create(
        cls, spec: SandboxSpec, environment_type: str, options: Mapping[str, object] | None = None
    ) -> HarborSandbox:
        if not spec.image:
            raise SandboxError("a Harbor sandbox runs an image: SandboxSpec.image is required")
        sandbox = cls(spec, environment_type, options or {})
        try:
            await sandbox._start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def _image(self) -> str:
        """The spec's image where the environment pulls it from: podman's store, a registry, or as named."""
        if self.registry:
            return await in_registry(self.spec.image, self.registry)
        return await in_podman(self.spec.image) if self.environment_type == "podman" else self.spec.image

    def start_request(self, image: str) -> dict:
        """The worker's ``start`` request for this sandbox: the environment Harbor is asked to make."""
        options = dict(self.options)
        if self.environment_type in COMPOSE_TYPES:
            fast_stop = self._dir / "fast-stop.yaml"
            fast_stop.write_text(FAST_STOP)
            options["extra_docker_compose"] = [*options.get("extra_docker_compose", ()), str(fast_stop)]
        limits = self.spec.limits
        return {
            "type": self.environment_type,
            "options": options,
            "image": image,
            "workdir": None,  # made after the start when the image lacks it (Harbor would wait for it in vain)
            "name": self.id,
            "cpus": limits.cpus,
            "memory_mb": math.ceil(limits.memory_bytes / 2**20) if limits.memory_bytes else None,
        }

    async def _start(self) -> None:
        request = self.start_request(await self._image())
        self._process = await HarborProcess.start()
        await self._process.request("start", **request)
        self._started = True
        files = {f"{self.workspace}/{confined_path(rel)}": data for rel, data in self.spec.files.items()}
        inline = sum(len(data) for data in files.values()) <= INLINE_FILE_BYTES
        dirs = " ".join(shlex.quote(d) for d in (self.workspace, *self.spec.writable_dirs))
        # One round trip: the folders, the files when small, and the keep-alive's pids (what no kill touches).
        script = " && ".join(
            [f"mkdir -p -- {dirs}", *(write_file(t, d) for t, d in files.items() if inline), KEEP_ALIVE]
        )
        self._keep_alive = (await self._run_quietly(script)).strip()
        if files and not inline:
            staging = self._dir / "files"
            for target, data in files.items():
                (staging / target.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                (staging / target.lstrip("/")).write_bytes(data)
            staging.chmod(0o755)
            await self._process.request(
                "upload_dir", source=str(staging / self.workspace.lstrip("/")), target=self.workspace
            )
        if self._deadline is not None:
            delay = self._deadline - time.monotonic()
            self._watchdog = asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(self._expire()))

    # -- Sandbox protocol -------------------------------------------------------------------------

    @property
    def workspace(self) -> str:
        return self.spec.workspace

    @property
    def gateway_url_inside(self) -> str | None:
        return self.spec.gateway_url  # the gateway's public URL: no bridge, no forwarder

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
        answer = await self._request("exec", **self.exec_request(argv, limit, env, cwd))
        elapsed = time.monotonic() - started
        code, stdout, stderr = decoded_exec(answer["stdout"] + answer["stderr"], answer["return_code"])
        timed_out = limit is not None and elapsed >= limit and code in (124, 137)
        return finished_exec(start, code, stdout, stderr, timed_out, elapsed, False, self._expired)

    def exec_request(
        self, argv: list[str], limit_s: float | None, env: Mapping[str, str] | None, cwd: str | None
    ) -> dict:
        """The worker's ``exec`` request: ``argv`` with its output in two files inside, sent back between
        markers (Harbor merges stderr into stdout and may allocate a TTY)."""
        files = f"/tmp/.harnessrl-exec-{secrets.token_hex(6)}"
        script = (
            f"{shlex.join(argv)} >{files}.out 2>{files}.err </dev/null; code=$?; echo {MARK}; "
            f"base64 {files}.out; echo {MARK}; base64 {files}.err; echo {MARK}; rm -f {files}.out {files}.err; "
            'exit "$code"'
        )
        return {
            "command": script,
            "cwd": in_workspace(self.workspace, cwd),
            "env": self._env(env or {}),
            "timeout_s": None if limit_s is None else math.ceil(limit_s + STUCK_GRACE_S),
        }

    async def exec_verifier(
        self, command: str | list[str], timeout_s: float | None = None, env: Mapping[str, str] | None = None
    ) -> ExecResult:
        # As in the docker backend: a new home and our sitecustomize.py under names the agent could
        # not have guessed, and `env -i` (nothing of the environment's own variables).
        home, python = verifier_paths()
        await self._run_quietly(f"mkdir -m 700 -- {home} && {write_file(f'{python}/{SITECUSTOMIZE}', verifier_site())}")
        variables = verifier_env({**self.spec.env, **(env or {})}, home, self.workspace, python)
        return await self.exec(clean_env_argv(variables, command), timeout_s)

    async def copy_workspace_to(self, other: Sandbox) -> None:
        if not isinstance(other, HarborSandbox):
            raise SandboxError(f"copy_workspace_to: {other.id} is not a Harbor sandbox (grade in the same backend)")
        await self._kill_execs()
        local = self._dir / "workspace"
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir()
        await self._request("download_dir", source=self.workspace, target=str(local))
        await other._replace_workspace(local)

    async def refuse_outside_links(self) -> list[Link]:
        # The agent's processes stopped and the links listed in one round trip.
        return await refuse_inside(self.workspace, self._run_quietly, first=self._kill_all())

    async def _replace_workspace(self, local: Path) -> None:
        if self.workspace == "/":
            raise SandboxError(f"sandbox {self.id}: a workspace of / cannot be replaced; grade in the agent's sandbox")
        quoted = shlex.quote(self.workspace)
        await self._run_quietly(f"rm -rf -- {quoted} && mkdir -p -- {quoted}")
        await self._request("upload_dir", source=str(local), target=self.workspace)

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = in_workspace(self.workspace, path)
        if len(data) <= INLINE_FILE_BYTES:  # one exec, not a mkdir and a copy (each a compose round trip)
            await self._run_quietly(write_file(target, data, mode))
            return
        source = self._dir / f"put-{secrets.token_hex(6)}"
        source.write_bytes(data)
        source.chmod(mode)
        try:
            await self._run_quietly(f"mkdir -p -- {shlex.quote(target.rsplit('/', 1)[0] or '/')}")
            await self._request("upload_file", source=str(source), target=target)
        finally:
            source.unlink(missing_ok=True)

    async def get_file(self, path: str) -> bytes:
        target = in_workspace(self.workspace, path)
        local = self._dir / f"get-{secrets.token_hex(6)}"
        try:
            await self._request("download_file", source=target, target=str(local))
        except HarborFailed as exc:
            if (await self.exec(["test", "-e", target])).exit_code != 0:
                raise FileNotFoundError(f"{target} in sandbox {self.id}") from exc
            raise
        try:
            if local.is_dir():
                raise IsADirectoryError(f"{target} in sandbox {self.id} is not a regular file")
            return local.read_bytes()
        finally:
            shutil.rmtree(local, ignore_errors=True) if local.is_dir() else local.unlink(missing_ok=True)

    async def fresh_dirs(self, *paths: str) -> None:
        quoted = " ".join(shlex.quote(p) for p in paths)
        await self._run_quietly(f"{self._kill_all()}; rm -rf -- {quoted} && mkdir -p -- {quoted}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        process, self._process = self._process, None
        if process is not None:
            if self._started:
                with contextlib.suppress(HarborFailed):
                    await process.request("stop")
            # else: stdin closing makes the worker cancel the start first, then stop what it made
            await process.close()
        await asyncio.to_thread(shutil.rmtree, self._dir, True)

    async def __aenter__(self) -> HarborSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers ----------------------------------------------------------------------------------

    async def _request(self, op: str, **fields) -> dict:
        if self._process is None:
            raise SandboxError(f"sandbox {self.id} is closed")
        return await self._process.request(op, **fields)

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        return exec_env(self.gateway_url_inside, self.spec.env, env)

    async def _run_quietly(self, script: str) -> str:
        """A command of ours, as root; its output, or SandboxError with it when it fails."""
        answer = await self._request("exec", command=script, cwd="/", user="root", timeout_s=300)
        output = answer["stdout"] + answer["stderr"]
        if answer["return_code"] != 0:
            raise SandboxError(f"sandbox {self.id}: `{script[:200]}` failed: {output[-500:]}")
        return output

    def _kill_all(self) -> str:
        return f"sh -c {shlex.quote(KILL_ALL)} sh {shlex.quote(self._keep_alive)}"

    async def _kill_execs(self) -> None:
        """Kill every process but the environment's keep-alive: what the agent left running."""
        with contextlib.suppress(HarborFailed):
            await self._request(
                "exec",
                command=self._kill_all(),
                cwd="/",
                user="root",
                timeout_s=60,
            )

    async def _expire(self) -> None:
        """Wall time is up: every process killed, the environment kept until close."""
        self._expired = True
        await self._kill_execs()
