"""Verifying an agent's work: upload the tests only now, run the verifier, read the reward.

Reward: ``/logs/verifier/reward.txt`` (a number) or ``reward.json`` (``{"reward": x}``) when the
verifier writes one, else 1.0 for exit status 0 and 0.0 otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harnesses.task import Task
from sandboxes import Sandbox

REWARD_TXT, REWARD_JSON = "/logs/verifier/reward.txt", "/logs/verifier/reward.json"


@dataclass(frozen=True)
class Verdict:
    reward: float | None  # None: the verifier itself failed (timeout, unreadable reward)
    exit_code: int
    output: str  # the verifier's stdout + stderr (tail), for logs
    error: str | None = None


async def verify(sandbox: Sandbox, task: Task) -> Verdict:
    for path, data in task.tests.items():
        await sandbox.put_file(f"/tests/{path}", data, mode=0o755)
    result = await sandbox.exec(task.verifier, timeout_s=task.verifier_timeout_s)
    output = result.text()[-4000:]
    if result.timed_out:
        return Verdict(None, result.exit_code, output, f"verifier timed out after {task.verifier_timeout_s:.0f} s")
    written = await _written_reward(sandbox)
    if isinstance(written, str):
        return Verdict(None, result.exit_code, output, written)
    reward = written if written is not None else (1.0 if result.exit_code == 0 else 0.0)
    return Verdict(reward, result.exit_code, output)


async def _written_reward(sandbox: Sandbox) -> float | None | str:
    """The reward file's value, None when there is none, or an error message."""
    for path in (REWARD_TXT, REWARD_JSON):
        try:
            text = (await sandbox.get_file(path)).decode().strip()
        except FileNotFoundError:
            continue
        try:
            return float(json.loads(text)["reward"] if path.endswith(".json") else text)
        except (ValueError, KeyError, TypeError):
            return f"{path} does not hold a reward: {text[:200]!r}"
    return None
