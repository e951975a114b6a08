"""What every backend's exec shares, before and after its own way of running the command.

Before: a closed sandbox refuses; the exec gets the tighter of its timeout and the sandbox's remaining
wall time; once that is spent nothing runs. After: why a finished exec was killed (the kernel's OOM
killer, its timeout, the sandbox's wall time), as ``ExecResult.killed_reason`` reports it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from sandboxes.protocol import ExecResult, SandboxError, exec_argv


@dataclass(frozen=True)
class ExecStart:
    argv: list[str]
    limit_s: float | None  # the tighter of the timeout and the wall time left; None: no limit
    reason: str  # which one it is: "timeout" | "wall_time"


def start_exec(
    sandbox_id: str,
    closed: bool,
    command: str | list[str],
    timeout_s: float | None,
    deadline: float | None,
    expired: bool,
) -> ExecStart | ExecResult:
    """How to run ``command``, or the answer without running it (the wall time is spent)."""
    if closed:
        raise SandboxError(f"sandbox {sandbox_id} is closed")
    limit, reason = exec_time_limit(timeout_s, deadline, expired)
    if limit is not None and limit <= 0:
        return ExecResult.wall_time_spent()
    return ExecStart(exec_argv(command), limit, reason)


def finished_exec(
    start: ExecStart,
    code: int,
    stdout: bytes,
    stderr: bytes,
    timed_out: bool,
    duration_s: float,
    oom_killed: bool,
    expired: bool,
) -> ExecResult:
    """The result, with why it was killed: an OOM kill first, then the limit that ran out."""
    killed = None
    if oom_killed and code != 0:
        killed = "oom"
    elif timed_out or expired:
        killed, timed_out = ("wall_time" if expired else start.reason), True
    return ExecResult(code, stdout, stderr, timed_out, duration_s, killed)


def shell_exit_code(returncode: int | None) -> int:
    """A process's exit status as a shell reports it: 128 + N for one killed by signal N."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


def exec_time_limit(timeout_s: float | None, deadline: float | None, expired: bool) -> tuple[float | None, str]:
    """The tighter of an exec's timeout and the sandbox's remaining wall time (``deadline`` on the
    monotonic clock), and which one it is: "timeout" or "wall_time"."""
    if expired:
        return 0.0, "wall_time"
    remaining = None if deadline is None else deadline - time.monotonic()
    if remaining is not None and (timeout_s is None or remaining < timeout_s):
        return remaining, "wall_time"
    return timeout_s, "timeout"


def killed_at(argv: list[str], limit_s: float | None) -> list[str]:
    """``argv`` under GNU ``timeout -s KILL`` (which kills the exec's whole process group) when limited."""
    return argv if limit_s is None else ["timeout", "-s", "KILL", f"{limit_s:.3f}s", *argv]


def in_workspace(workspace: str, path: str | None) -> str:
    """A path inside the sandbox (an exec's cwd, a file): ``path`` when absolute, else under the
    workspace; the workspace itself for none."""
    return path if path and path.startswith("/") else f"{workspace}/{path}" if path else workspace


def exec_env(gateway_url_inside: str | None, declared: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """An exec's environment in a sandbox of an image: the gateway's URL as the agent reaches it, the
    sandbox's own variables (``SandboxSpec.env``), then the exec's."""
    base = {"HARNESSRL_GATEWAY_URL": gateway_url_inside} if gateway_url_inside else {}
    return {**base, **declared, **env}


def verifier_paths() -> tuple[str, str]:
    """A new home for the verifier and the folder of its sitecustomize.py, under names the agent could
    not have guessed (for the backends whose agent shares the verifier's /tmp: docker, harbor)."""
    token = secrets.token_hex(8)
    return f"/tmp/harnessrl-verifier-home-{token}", f"/tmp/harnessrl-verifier-python-{token}"


def clean_env_argv(variables: Mapping[str, str], command: str | list[str]) -> list[str]:
    """``command`` under ``env -i`` with ``variables`` alone: nothing of the sandbox's own environment."""
    return ["env", "-i", *(f"{k}={v}" for k, v in variables.items()), *exec_argv(command)]
