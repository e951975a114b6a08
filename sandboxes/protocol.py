"""The `Sandbox` protocol and the records it speaks in.

A sandbox is a place where an agent runs: a root file system (a Docker image or a local root), a
writable workspace, resource limits, and one network route only, to the harnessrl gateway. Callers
(the rollout runner) hold many at once, so every method is async.

Paths given to `put_file`/`get_file`/`exec(cwd=...)` are paths inside the sandbox; a relative path is
relative to the workspace.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from sandboxes.verifier_site import WORKSPACE_VARIABLE

if TYPE_CHECKING:
    from sandboxes.workspace_links import Link

KilledReason = Literal["timeout", "wall_time", "oom"]

WORKSPACE = "/workspace"  # where the workspace appears inside isolated sandboxes
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The verifier's Python runs this as its sitecustomize.py (see its docstring): the working directory's
# modules are searched after the standard library and site-packages.
VERIFIER_SITE, SITECUSTOMIZE = Path(__file__).with_name("verifier_site.py"), "sitecustomize.py"
# Variables that make a program load code it was not asked to run: never in the verifier's environment,
# whoever set them (a verifier that needs one sets it in its own script).
LOADER_VARIABLES = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "GIT_CONFIG_GLOBAL",
    }
)


class SandboxError(RuntimeError):
    """A sandbox could not be created or used; the message names the fix."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox (all its processes together)."""

    cpus: float | None = None  # CPU cores, may be fractional (0.5 = half a core); None = unlimited
    memory_bytes: int | None = None  # resident memory in bytes, swap included; None = unlimited
    wall_time_s: float | None = None  # seconds from creation; then every process is killed
    pids: int | None = 512  # processes and threads at once (fork bombs); None = unlimited


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. `image` is for docker, `root` for local; the other fields are common."""

    image: str | None = None  # docker: image name, e.g. "harnessrl/opencode:latest"
    root: str | None = None  # local: host directory used as the read-only root; None = host system dirs
    files: Mapping[str, bytes] = field(default_factory=dict)  # workspace-relative path -> content
    env: Mapping[str, str] = field(default_factory=dict)  # environment of every exec
    limits: Limits = field(default_factory=Limits)
    gateway_url: str | None = None  # e.g. "http://127.0.0.1:8000/r/hrl-x/v1"; None = no network at all
    gateway_port_inside: int | None = None  # port of the forwarded gateway inside; None = the gateway's
    ro_binds: tuple[str, ...] = ()  # host paths shown read-only at the same path (e.g. an agent's install)
    writable_dirs: tuple[str, ...] = ("/logs", "/tests")  # extra private writable dirs (Harbor verifiers)
    name: str | None = None  # prefix of the sandbox's id, for logs and `docker ps`
    # The workspace's path inside (the default cwd of exec; a Harbor image's WORKDIR); None = WORKSPACE.
    # With a local `root`, the root's content at that path is copied into the private workspace first.
    workdir: str | None = None
    # docker: run the gateway forwarder in a sidecar container of this image (it needs python3) whose
    # network namespace the sandbox shares, so the sandbox's own image needs nothing for the route.
    # None: the forwarder runs inside the sandbox's container (its image has python3).
    forwarder_image: str | None = None
    # Full network (docker: the host's network; bwrap: the host's network namespace), the gateway URL
    # then passed unchanged. Only for tasks that need it and runs that allow it (--allow-internet).
    internet: bool = False

    @property
    def workspace(self) -> str:
        """The workspace's path inside an isolated sandbox."""
        return posixpath.normpath(self.workdir) if self.workdir else WORKSPACE


@dataclass(frozen=True)
class ExecResult:
    exit_code: int  # the command's exit status; 128 + N (or -N) when killed by signal N
    stdout: bytes
    stderr: bytes
    timed_out: bool  # the exec's timeout or the sandbox's wall time expired before it finished
    duration_s: float  # wall-clock seconds from start to exit
    killed_reason: KilledReason | None = None  # why it was killed, when it was

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None

    @classmethod
    def wall_time_spent(cls) -> ExecResult:
        """The answer to an exec asked for after the sandbox's wall time ran out: nothing ran."""
        return cls(137, b"", b"wall time of the sandbox exceeded\n", True, 0.0, "wall_time")

    def text(self) -> str:
        """stdout then stderr decoded leniently, for logs and error messages."""
        return (self.stdout + self.stderr).decode("utf-8", "replace")


@runtime_checkable
class Sandbox(Protocol):
    """A running sandbox. Create with `sandboxes.create_sandbox`; always `close()` (or `async with`)."""

    id: str
    spec: SandboxSpec

    @property
    def workspace(self) -> str:
        """The workspace's path inside the sandbox (the default cwd of `exec`)."""

    @property
    def gateway_url_inside(self) -> str | None:
        """The URL that reaches `spec.gateway_url` from inside (path kept), or None without a gateway."""

    async def exec(
        self,
        command: str | list[str],
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command (a string goes through `sh -c`); never raises for a failing command."""

    async def exec_verifier(
        self, command: str | list[str], timeout_s: float | None = None, env: Mapping[str, str] | None = None
    ) -> ExecResult:
        """Run the verifier in the workspace with nothing of the agent's environment: a new, empty
        `$HOME`, and only `verifier_env` of the sandbox's own `spec.env` and `env` (no user-site Python,
        no `LOADER_VARIABLES`, the workspace's modules after everything else on Python's import path).
        Call `fresh_dirs` first: it stops the agent's processes."""

    async def copy_workspace_to(self, other: Sandbox) -> None:
        """Stop every process in this sandbox, then make `other`'s workspace (a sandbox of the same
        backend) an exact copy of this one's: the agent's work, graded in a fresh sandbox."""

    async def refuse_outside_links(self) -> list[Link]:
        """Stop every process in this sandbox, then remove each symbolic link of the workspace whose
        target, resolved in the sandbox's view, leaves the workspace (`sandboxes.workspace_links`):
        the links removed. Nothing of the agent's may run from here to the verifier's end."""

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file, creating its parent directories."""

    async def get_file(self, path: str) -> bytes:
        """Read a file; FileNotFoundError when it does not exist."""

    async def fresh_dirs(self, *paths: str) -> None:
        """Stop every process an earlier exec left running, then make each absolute path (one of
        `spec.writable_dirs` or a folder right under one) a new, empty directory: whatever the agent
        left there, files or links, is gone. The verifier's folders are made so right before it runs."""

    async def close(self) -> None:
        """Kill every process, remove the sandbox and its workspace. Idempotent."""

    async def __aenter__(self) -> Sandbox: ...

    async def __aexit__(self, *exc: object) -> None: ...


def verifier_env(declared: Mapping[str, str], home: str, workspace: str, python_site: str) -> dict[str, str]:
    """The verifier's whole environment: the task's own variables (the sandbox's `spec.env`, the task's
    verifier env) over a fixed PATH and locale, a fresh `home`, no user-site Python, no loader variables,
    and a PYTHONPATH of `python_site` alone: the read-only folder holding `verifier_site` as
    sitecustomize.py, told the working directory `workspace`."""
    env = {"PATH": STANDARD_PATH, "LANG": "C.UTF-8", **declared, "HOME": home, "PYTHONNOUSERSITE": "1"}
    env = {key: value for key, value in env.items() if key not in LOADER_VARIABLES}
    return env | {"PYTHONPATH": python_site, WORKSPACE_VARIABLE: workspace}


@functools.cache
def verifier_site() -> bytes:
    """The content of the verifier's sitecustomize.py."""
    return VERIFIER_SITE.read_bytes()


def exec_argv(command: str | list[str]) -> list[str]:
    """An exec's argv: a string is a shell command line (``/bin/sh -c``), a list is the argv itself."""
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


def confined_path(path: str) -> str:
    """A workspace-relative file path, normalised; SandboxError for one that would leave the workspace."""
    normal = posixpath.normpath(path)
    if not path or path.startswith("/") or normal == ".." or normal.startswith("../") or normal == ".":
        raise SandboxError(f"file path {path!r} must be relative to the workspace and stay inside it")
    return normal
