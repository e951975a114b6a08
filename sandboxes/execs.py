"""What every backend's exec shares, before and after its own way of running the command.

Before: a closed sandbox refuses; the exec gets the tighter of its timeout and the sandbox's remaining
wall time; once that is spent nothing runs. After: why a finished exec was killed (the kernel's OOM
killer, its timeout, the sandbox's wall time), as ``ExecResult.killed_reason`` reports it.
"""

from __future__ import annotations

import time
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


def exec_time_limit(timeout_s: float | None, deadline: float | None, expired: bool) -> tuple[float | None, str]:
    """The tighter of an exec's timeout and the sandbox's remaining wall time (``deadline`` on the
    monotonic clock), and which one it is: "timeout" or "wall_time"."""
    if expired:
        return 0.0, "wall_time"
    remaining = None if deadline is None else deadline - time.monotonic()
    if remaining is not None and (timeout_s is None or remaining < timeout_s):
        return remaining, "wall_time"
    return timeout_s, "timeout"
