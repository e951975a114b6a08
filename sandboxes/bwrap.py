"""The bubblewrap command line of a local sandbox: what it sees and what it may write.

The new root is bubblewrap's own tmpfs, remounted read-only at the end, with:
- the system directories of the host (or every top-level entry of `spec.root`) bound read-only, so
  programs run but host data (/root, /home, /work, /var, the host's /tmp, other sandboxes) is absent;
- the sandbox's private, persistent directories bound read-write: /workspace, /tmp, $HOME and the
  spec's `writable_dirs` (Harbor's /logs, /tests);
- the gateway socket's directory and the forwarder script, when a gateway is exposed;
- for the verifier, its sitecustomize.py's folder at /run/harnessrl/verifier-python, read-only;
- new user, pid, net, ipc, uts and cgroup namespaces: no network but loopback, and killing bwrap
  (`--die-with-parent`) ends every process of the exec.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")  # host secrets
SKIPPED_ROOT_ENTRIES = {"proc", "dev", "sys", "tmp", "run"}  # provided fresh, never from a root
HOME = "/home/agent"
RUN_DIR = "/run/harnessrl"  # forwarder.py and gw/gateway.sock live here inside
SOCKET_DIR_INSIDE = f"{RUN_DIR}/gw"
FORWARDER_INSIDE = f"{RUN_DIR}/forwarder.py"
VERIFIER_PYTHON = f"{RUN_DIR}/verifier-python"  # the verifier's sitecustomize.py (sandboxes/verifier_site.py)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@dataclass(frozen=True)
class Layout:
    """Host paths behind a sandbox's mounts."""

    root: str | None  # spec.root, or None for the host's system directories
    binds: Mapping[str, Path]  # inside path -> host dir, read-write (workspace, /tmp, home, extras)
    ro_binds: tuple[str, ...]  # host paths shown read-only at the same path
    socket_dir: Path | None  # host dir holding gateway.sock, None without a gateway
    forwarder: Path  # host path of forwarder.py
    share_net: bool = False  # the host's network namespace (a task that needs the internet, allowed)
    ro_mounts: Mapping[str, Path] = field(default_factory=dict)  # inside path -> host dir, read-only

    def host_path(self, inside: str) -> Path | None:
        """The host path behind an absolute inside path, when it lies in a writable bind."""
        for mount in sorted(self.binds, key=len, reverse=True):
            if inside == mount or inside.startswith(mount.rstrip("/") + "/"):
                return self.binds[mount] / os.path.relpath(inside, mount)
        return None


def verifier_layout(layout: Layout, home: Path, python: Path) -> Layout:
    """The verifier's: a new, empty $HOME, and its sitecustomize.py's folder read-only at VERIFIER_PYTHON."""
    return replace(layout, binds={**layout.binds, HOME: home}, ro_mounts={VERIFIER_PYTHON: python})


def _root_args(root: str | None) -> list[str]:
    """Read-only binds of the root's top-level entries (symlinks such as /bin -> usr/bin kept)."""
    if root is None:
        entries = [(p, p) for p in SYSTEM_DIRS if os.path.lexists(p)]
    else:
        entries = [(os.path.join(root, e), "/" + e) for e in sorted(os.listdir(root)) if e not in SKIPPED_ROOT_ENTRIES]
    args: list[str] = []
    for source, dest in entries:
        if os.path.islink(source):
            args += ["--symlink", os.readlink(source), dest]
        elif os.path.isdir(source):
            args += ["--ro-bind", source, dest]
    if root is None:
        for secret in MASKED_FILES:
            if os.path.exists(secret):
                args += ["--ro-bind", "/dev/null", secret]
    return args


def command(layout: Layout, argv: list[str], env: Mapping[str, str], cwd: str) -> list[str]:
    """The full bwrap argv that runs `argv` in the sandbox."""
    args = ["bwrap", "--die-with-parent", "--unshare-all", "--new-session", "--hostname", "sandbox"]
    if layout.share_net:
        args.append("--share-net")
    args += _root_args(layout.root)
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run"]
    for inside, host in layout.binds.items():
        args += ["--bind", str(host), inside]
    for path in layout.ro_binds:
        args += ["--ro-bind", path, path]
    for inside, host in layout.ro_mounts.items():
        args += ["--ro-bind", str(host), inside]
    if layout.socket_dir is not None:
        args += [
            "--ro-bind",
            str(layout.forwarder),
            FORWARDER_INSIDE,
            "--bind",
            str(layout.socket_dir),
            SOCKET_DIR_INSIDE,
        ]
    args += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--", *argv]
