"""CPU, memory and process limits for a group of host processes (the local backend).

A cgroup when this process may create one (cgroup v1 controllers, or v2 with the controllers
delegated to our own cgroup), so the limits hold for every process of the sandbox together and OOM
kills are counted by the kernel. Otherwise an address-space rlimit via `prlimit`, which is weaker:
per process, virtual memory (some runtimes reserve far more than they use), no CPU share, no OOM
count. `enforced` says which one a sandbox got.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path

from sandboxes.protocol import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000


def _own_cgroup_paths() -> dict[str, str]:
    """Controller name ("" for v2) -> our cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            paths[name] = path
    return paths


def _write(path: Path, value: object) -> None:
    path.write_text(f"{value}\n")


class ProcessLimits:
    """Limits for one sandbox's processes. `wrap(argv)` makes a command start inside them."""

    def __init__(self, limits: Limits, dirs: list[Path], enforced: str, oom_file: Path | None) -> None:
        self.limits, self.dirs, self.enforced, self._oom_file = limits, dirs, enforced, oom_file

    @classmethod
    def create(cls, name: str, limits: Limits) -> ProcessLimits:
        wanted = limits.memory_bytes is not None or limits.cpus is not None or limits.pids is not None
        if not wanted:
            return cls(limits, [], "none", None)
        for make in (cls._cgroup_v2, cls._cgroup_v1):
            with contextlib.suppress(OSError, ValueError):
                made = make(name, limits)
                if made is not None:
                    return made
        return cls(limits, [], "rlimit" if limits.memory_bytes else "none", None)

    @classmethod
    def _cgroup_v1(cls, name: str, limits: Limits) -> ProcessLimits | None:
        own = _own_cgroup_paths()
        settings = {
            "memory": _v1_memory(limits.memory_bytes),
            "cpu": _v1_cpu(limits.cpus),
            "pids": {"pids.max": limits.pids} if limits.pids else {},
        }
        dirs: list[Path] = []
        try:
            for controller, values in settings.items():
                if not values or controller not in own:
                    continue
                path = CGROUP_ROOT / controller / own[controller].lstrip("/") / f"harnessrl-{name}"
                path.mkdir()
                dirs.append(path)
                for key, value in values.items():
                    _write(path / key, value)
        except OSError:
            cls._rmdirs(dirs)
            raise
        if limits.memory_bytes and not any(d.is_relative_to(CGROUP_ROOT / "memory") for d in dirs):
            cls._rmdirs(dirs)
            return None  # memory was asked for and cannot be enforced this way
        oom = next((d / "memory.oom_control" for d in dirs if (d / "memory.oom_control").exists()), None)
        return cls(limits, dirs, "cgroup v1", oom)

    @classmethod
    def _cgroup_v2(cls, name: str, limits: Limits) -> ProcessLimits | None:
        own = _own_cgroup_paths().get("")
        mount = next((p for p in (CGROUP_ROOT / "unified", CGROUP_ROOT) if (p / "cgroup.controllers").exists()), None)
        if own is None or mount is None:
            return None
        parent = mount / own.lstrip("/")
        delegated = set((parent / "cgroup.subtree_control").read_text().split())
        needed = {c for c, v in (("memory", limits.memory_bytes), ("cpu", limits.cpus), ("pids", limits.pids)) if v}
        if not needed <= delegated:
            return None  # v1 (or rlimits) will do; enabling controllers here would move our own process
        path = parent / f"harnessrl-{name}"
        path.mkdir()
        try:
            if limits.memory_bytes:
                _write(path / "memory.max", limits.memory_bytes)
                with contextlib.suppress(OSError):
                    _write(path / "memory.swap.max", 0)
            if limits.cpus:
                _write(path / "cpu.max", f"{int(limits.cpus * CFS_PERIOD_US)} {CFS_PERIOD_US}")
            if limits.pids:
                _write(path / "pids.max", limits.pids)
        except OSError:
            cls._rmdirs([path])
            raise
        return cls(limits, [path], "cgroup v2", path / "memory.events")

    def wrap(self, argv: list[str]) -> list[str]:
        """argv prefixed so that it starts inside the limits (the shell execs it: same pid)."""
        if self.dirs:
            joins = "; ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))} || exit 125" for d in self.dirs)
            return ["/bin/sh", "-c", f'{joins}; exec "$@"', "sh", *argv]
        if self.enforced == "rlimit":
            return ["prlimit", f"--as={self.limits.memory_bytes}", "--", *argv]
        return argv

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory so far (0 when it cannot tell)."""
        if self._oom_file is None:
            return 0
        with contextlib.suppress(OSError):
            for line in self._oom_file.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup, including any that left its process group."""
        for _ in range(20):  # a process may fork while we kill; a few rounds catch the children
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def close(self) -> None:
        self.kill_all()
        self._rmdirs(self.dirs)
        self.dirs = []

    @staticmethod
    def _rmdirs(dirs: list[Path]) -> None:
        for d in dirs:
            for _ in range(50):  # rmdir fails while the killed processes are still exiting
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _v1_memory(memory_bytes: int | None) -> dict[str, int]:
    if not memory_bytes:
        return {}
    values = {"memory.limit_in_bytes": memory_bytes}
    if Path(CGROUP_ROOT / "memory" / "memory.memsw.limit_in_bytes").exists():
        values["memory.memsw.limit_in_bytes"] = memory_bytes  # no swapping past the limit either
    return values


def _v1_cpu(cpus: float | None) -> dict[str, int]:
    if not cpus:
        return {}
    return {"cpu.cfs_period_us": CFS_PERIOD_US, "cpu.cfs_quota_us": int(cpus * CFS_PERIOD_US)}
