"""Verifying an agent's work: fresh verifier folders, the tests uploaded only now, the verifier run.

Nothing the agent wrote counts: right before the tests are uploaded, every process it left running is
stopped and ``/tests`` and ``/logs/verifier`` are made new and empty, so a planted ``reward.txt`` or a
fake test file is gone. The reward then comes from where the task says:
- ``file`` (Harbor tasks, and JSONL tasks with ``"reward_file": true``): ``/logs/verifier/reward.txt``
  (a number) or ``reward.json`` (``{"reward": x}``) as the verifier wrote it, else 1.0 for exit status
  0 and 0.0 otherwise;
- ``exit_code`` (other JSONL tasks): 1.0 for exit status 0, 0.0 otherwise; a reward file is ignored,
  so code of the agent's that the check runs cannot turn a failed check into a pass.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from harnesses.task import Task
from sandboxes import Sandbox

TESTS_DIR, VERIFIER_DIR = "/tests", "/logs/verifier"
REWARD_TXT, REWARD_JSON = f"{VERIFIER_DIR}/reward.txt", f"{VERIFIER_DIR}/reward.json"


@dataclass(frozen=True)
class Verdict:
    reward: float | None  # None: the verifier itself failed (timeout, unreadable reward)
    exit_code: int
    output: str  # the verifier's stdout + stderr (tail), for logs
    error: str | None = None


async def verify(sandbox: Sandbox, task: Task) -> Verdict:
    await sandbox.fresh_dirs(TESTS_DIR, VERIFIER_DIR)
    for path, data in task.tests.items():
        await sandbox.put_file(f"{TESTS_DIR}/{path}", data, mode=0o755)
    result = await sandbox.exec(task.verifier, timeout_s=task.verifier_timeout_s)
    output = result.text()[-4000:]
    if result.timed_out:
        return Verdict(None, result.exit_code, output, f"verifier timed out after {task.verifier_timeout_s:.0f} s")
    passed = 1.0 if result.exit_code == 0 else 0.0
    if task.reward_source == "exit_code":
        return Verdict(passed, result.exit_code, output)
    written = await _written_reward(sandbox)
    if isinstance(written, str):
        return Verdict(None, result.exit_code, output, written)
    return Verdict(written if written is not None else passed, result.exit_code, output)


async def _written_reward(sandbox: Sandbox) -> float | None | str:
    """The reward file's value, None when there is none, or an error message."""
    for path in (REWARD_TXT, REWARD_JSON):
        try:
            text = (await sandbox.get_file(path)).decode().strip()
        except FileNotFoundError:
            continue
        try:
            value = float(json.loads(text)["reward"] if path.endswith(".json") else text)
        except (ValueError, KeyError, TypeError):
            return f"{path} does not hold a reward: {text[:200]!r}"
        if not math.isfinite(value):
            return f"{path} does not hold a finite reward: {text[:200]!r}"
        return value
    return None
