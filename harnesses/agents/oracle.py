"""Two agents that make no model calls, for checking tasks: `oracle` and `nop`.

- ``oracle`` runs the task's reference solution as the agent: a Harbor task's ``solution/`` folder is
  uploaded to ``/solution`` and ``bash /solution/solve.sh`` runs in the working directory with
  ``[solution] env``; a JSONL task's ``solution`` script runs through ``sh -c``. On a sound task it
  scores 1. A task without a solution fails the rollout, saying so.
- ``nop`` does nothing at all. On a sound task it scores 0 (a task that passes untouched checks nothing).

Neither needs the gateway route nor anything installed in the task's image.
"""

from __future__ import annotations

from dataclasses import replace

from harnesses.harness import AgentOutcome, RolloutTarget
from harnesses.task import Task
from sandboxes import Sandbox, SandboxSpec

SOLUTION_DIR = "/solution"
LOG_CHARS = 8000


class NoSolution(RuntimeError):
    """The task has no reference solution; the message names the file to add."""


class OracleHarness:
    name = "oracle"
    expected_reward = 1.0  # what `harnessrl tasks check` requires of a task
    side_call_patterns: dict[str, str] = {}

    def sandbox_spec(self, task: Task, target: RolloutTarget, base: SandboxSpec) -> SandboxSpec:
        writable = tuple(dict.fromkeys((*base.writable_dirs, SOLUTION_DIR)))
        return replace(base, files={**base.files, **task.files}, gateway_url=None, writable_dirs=writable)

    async def run(self, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float) -> AgentOutcome:
        if not task.solution:
            raise NoSolution(
                f'task {task.name} has no reference solution: add solution/solve.sh (JSONL: a "solution" script)'
            )
        if task.solution_files:
            for path, data in task.solution_files.items():
                await sandbox.put_file(f"{SOLUTION_DIR}/{path}", data, mode=0o755)
            command: str | list[str] = ["bash", f"{SOLUTION_DIR}/solve.sh"]
        else:
            command = task.solution
        result = await sandbox.exec(command, timeout_s=timeout_s, env=dict(task.solution_env) or None)
        log = f"[oracle: exit code {result.exit_code} after {result.duration_s:.1f} s]\n{result.text()[-LOG_CHARS:]}"
        return AgentOutcome("", log, result.exit_code, result.timed_out)


class NopHarness:
    name = "nop"
    expected_reward = 0.0  # doing nothing must not pass
    side_call_patterns: dict[str, str] = {}

    def sandbox_spec(self, task: Task, target: RolloutTarget, base: SandboxSpec) -> SandboxSpec:
        return replace(base, files={**base.files, **task.files}, gateway_url=None)

    async def run(self, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float) -> AgentOutcome:
        return AgentOutcome("", "[nop: did nothing]", 0)
