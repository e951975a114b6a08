"""Verifying an agent's work: fresh verifier folders, the tests uploaded only now, the verifier run.

Nothing the agent wrote counts: right before the tests are uploaded, every process it left running is
stopped and ``/tests`` and ``/logs/verifier`` are made new and empty, so a planted ``reward.txt`` or a
fake test file is gone. The reward then comes from where the task says:
- ``file`` (Harbor tasks, and JSONL tasks with ``"reward_file": true``): ``/logs/verifier/reward.txt``
  (a number) or ``reward.json`` as the verifier wrote it, else 1.0 for exit status 0 and 0.0
  otherwise. ``reward.json`` is an object of numbers: ``{"reward": x}`` is the component
  ``verifier``; with several keys each is a component ``verifier.<key>`` (so ``{"tests": 0.8,
  "style": 0.2}`` records both, and the rollout's reward is their sum, as components add up);
- ``exit_code`` (other JSONL tasks): 1.0 for exit status 0, 0.0 otherwise; a reward file is ignored,
  so code of the agent's that the check runs cannot turn a failed check into a pass.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from harnesses.task import Task
from sandboxes import Sandbox

TESTS_DIR, VERIFIER_DIR = "/tests", "/logs/verifier"
REWARD_TXT, REWARD_JSON = f"{VERIFIER_DIR}/reward.txt", f"{VERIFIER_DIR}/reward.json"
MAX_JSON_KEYS = 32
KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a component's name must be a plain word


@dataclass(frozen=True)
class Verdict:
    reward: float | None  # None: the verifier itself failed (timeout, unreadable reward)
    exit_code: int
    output: str  # the verifier's stdout + stderr (tail), for logs
    error: str | None = None
    parts: Mapping[str, float] | None = None  # reward.json's keys, when it has several

    @property
    def components(self) -> dict[str, float | None]:
        """The rollout's reward components from the verifier: ``verifier`` or ``verifier.<key>``."""
        if self.parts:
            return {f"verifier.{key}": value for key, value in self.parts.items()}
        return {"verifier": self.reward}


async def verify(sandbox: Sandbox, task: Task) -> Verdict:
    await sandbox.fresh_dirs(TESTS_DIR, VERIFIER_DIR)
    for path, data in task.tests.items():
        await sandbox.put_file(f"{TESTS_DIR}/{path}", data, mode=0o755)
    result = await sandbox.exec(task.verifier, timeout_s=task.verifier_timeout_s, env=dict(task.verifier_env) or None)
    output = result.text()[-4000:]
    if result.timed_out:
        return Verdict(None, result.exit_code, output, f"verifier timed out after {task.verifier_timeout_s:.0f} s")
    passed = 1.0 if result.exit_code == 0 else 0.0
    if task.reward_source == "exit_code":
        return Verdict(passed, result.exit_code, output)
    written = await _written_reward(sandbox)
    if isinstance(written, str):
        return Verdict(None, result.exit_code, output, written)
    if written is None:
        return Verdict(passed, result.exit_code, output)
    parts = written if len(written) > 1 else None
    return Verdict(sum(written.values()), result.exit_code, output, parts=parts)


async def _written_reward(sandbox: Sandbox) -> dict[str, float] | None | str:
    """The reward file's values by key, None when there is none, or an error message."""
    for path in (REWARD_TXT, REWARD_JSON):
        try:
            text = (await sandbox.get_file(path)).decode().strip()
        except FileNotFoundError:
            continue
        try:
            values = _json_rewards(text) if path.endswith(".json") else {"reward": float(text)}
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return f"{path} does not hold a reward (a number; reward.json: an object of numbers): {text[:200]!r}"
        if not all(math.isfinite(v) for v in values.values()):
            return f"{path} does not hold a finite reward: {text[:200]!r}"
        return values
    return None


def _json_rewards(text: str) -> dict[str, float]:
    data = json.loads(text)
    if not isinstance(data, dict) or not data or len(data) > MAX_JSON_KEYS:
        raise ValueError("an object of 1 to 32 numbers")
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not KEY.fullmatch(key):
            raise ValueError(f"{key!r}: {value!r}")
    return {key: float(value) for key, value in data.items()}
