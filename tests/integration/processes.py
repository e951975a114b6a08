"""Starting `harnessrl serve` as a real subprocess and finding what it started."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harnessrl.engine.process import ManagedProcess
from harnessrl.server import free_port
from tests.builders import TEST_ADMIN_KEY


def serve_process(
    tmp_path: Path, *args: str, port: int | None = None, admin_key: str | None = TEST_ADMIN_KEY
) -> ManagedProcess:
    """`harnessrl serve ARGS` on a free port, with the tests' admin key (None: serve's own, under
    ``tmp_path/home``); health is the gateway's /health."""
    port = port or free_port()
    key = ["--admin-key", admin_key] if admin_key is not None else []
    command = [sys.executable, "-m", "harnessrl.cli", "serve", "--port", str(port), *key, *args]
    env = {**os.environ, "HARNESSRL_HOME": str(tmp_path / "home")}
    env.pop("HARNESSRL_ADMIN_KEY", None)
    return ManagedProcess(command, f"http://127.0.0.1:{port}", tmp_path / f"serve-{port}.log", env)


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
