"""Verifying an agent's work: fresh verifier folders, the tests uploaded only now, the verifier run.

Nothing the agent wrote counts: right before the tests are uploaded, every process it left running is
stopped and ``/tests`` and ``/logs/verifier`` are made new and empty, so a planted ``reward.txt`` or a
fake test file is gone; and every link in the workspace that leads out of it is removed
(`Sandbox.refuse_outside_links`), so ``answer.txt -> /tests/expected.txt`` cannot hand the verifier its
own files. The links removed are named in the verdict's detail (``refused_links``) and its log. The
reward then comes from where the task says:
- ``file`` (Harbor tasks, and JSONL tasks with ``"reward_file": true``): Harbor's contract (see
  `read_reward`): the key ``reward`` of ``/logs/verifier/reward.json`` (or the task's ``reward_key``),
  whose other numeric keys are metrics recorded beside it and never added to it; else the number in
  ``/logs/verifier/reward.txt``; with neither file, 1.0 for exit status 0 and 0.0 otherwise;
- ``exit_code`` (other JSONL tasks): 1.0 for exit status 0, 0.0 otherwise; a reward file is ignored,
  so code of the agent's that the check runs cannot turn a failed check into a pass.

The verdict is the rollout's reward component ``verifier``; its detail (`Verdict.detail`: metrics, exit
status, the verifier's output with head and tail kept when long) is stored with the rollout.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harnesses.task import Task
from sandboxes import Sandbox
from sandboxes.workspace_links import Link

logger = logging.getLogger(__name__)

TESTS_DIR, VERIFIER_DIR = "/tests", "/logs/verifier"
REWARD_TXT, REWARD_JSON = f"{VERIFIER_DIR}/reward.txt", f"{VERIFIER_DIR}/reward.json"
VERIFIER = "verifier"  # the rollout's reward component, and the name of its detail
REWARD_KEY = "reward"  # reward.json's key of the reward, unless the task names another (reward_key)
MAX_METRICS, MAX_METRIC_NAME = 64, 100  # further metrics, and longer names (bytes of JSON), are left out
# The verifier's output kept with the rollout, in bytes of JSON: within the API's limit on the verifier's
# detail (gateway/api/protocol.py VERIFIER_DETAIL_BYTES, 64 KiB) beside its metrics and error.
MAX_LOG_BYTES = 48 * 1024
HEAD_SHARE = 0.25  # of a cut log, the head (setup, the first failure); the rest is the tail (the summary)
MAX_REFUSED_BYTES = 2048  # of the refused links' names kept in the detail (bytes of JSON); all are counted


class RewardFileError(ValueError):
    """The verifier's reward file holds no usable reward; the message names the task and the fix."""


@dataclass(frozen=True)
class Verdict:
    reward: float | None  # None: the verifier itself failed (timeout, unreadable reward)
    exit_code: int
    output: str  # the verifier's stdout + stderr, whole or its head and tail (bounded_log)
    error: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)  # reward.json's other numbers, never added
    refused_links: tuple[Link, ...] = ()  # links out of the workspace, removed before the verifier ran

    @property
    def components(self) -> dict[str, float | None]:
        """The rollout's reward component from the verifier: the metrics are no part of the reward."""
        return {VERIFIER: self.reward}

    def detail(self) -> dict[str, Any]:
        """What the rollout keeps of the verifier beside its reward (``reward_details["verifier"]``)."""
        detail = {"exit_code": self.exit_code, "metrics": dict(self.metrics), "log": self.output}
        if self.refused_links:
            detail["refused_links"] = refused_detail(self.refused_links)
        return detail | ({"error": self.error} if self.error else {})


async def verify(sandbox: Sandbox, task: Task) -> Verdict:
    await sandbox.fresh_dirs(TESTS_DIR, VERIFIER_DIR)
    # With the agent stopped and before /tests exists: a link may point at a file that is not there yet.
    refused = tuple(await sandbox.refuse_outside_links())
    if note := _refusal_note(refused):
        logger.warning("task %s: %s", task.name, note.strip())
    for path, data in task.tests.items():
        await sandbox.put_file(f"{TESTS_DIR}/{path}", data, mode=0o755)
    # A fresh $HOME and only the task's environment: nothing the agent left can run inside the verifier.
    result = await sandbox.exec_verifier(task.verifier, timeout_s=task.verifier_timeout_s, env=task.verifier_env)
    output = bounded_log(note + result.text())
    verdict = Verdict(None, result.exit_code, output, refused_links=refused)
    if result.timed_out:
        return replace(verdict, error=f"verifier timed out after {task.verifier_timeout_s:.0f} s")
    passed = 1.0 if result.exit_code == 0 else 0.0
    if task.reward_source == "exit_code":
        return replace(verdict, reward=passed)
    try:
        written = await _text(sandbox, task, REWARD_JSON), await _text(sandbox, task, REWARD_TXT)
        reward, metrics = read_reward(task, *written)
    except RewardFileError as exc:
        return replace(verdict, error=str(exc))
    return replace(verdict, reward=passed if reward is None else reward, metrics=metrics)


def _refusal_note(links: tuple[Link, ...]) -> str:
    """The verifier's log's first line when links were removed, naming them (bounded_log keeps the head)."""
    if not links:
        return ""
    named = ", ".join(repr(str(link)) for link in links[:8]) + (f" and {len(links) - 8} more" if len(links) > 8 else "")
    return f"[harnessrl: {len(links)} links out of the workspace removed before the verifier ran: {named[:1000]}]\n"


def refused_detail(links: tuple[Link, ...]) -> dict[str, Any]:
    """The detail's ``refused_links``: how many, and the first of them (``path -> target``) within
    MAX_REFUSED_BYTES of JSON."""
    named: list[str] = []
    for link in links:
        text = str(link)[:200]
        if _json_bytes(json.dumps([*named, text])) > MAX_REFUSED_BYTES:
            break
        named.append(text)
    return {"count": len(links), "links": named}


async def _text(sandbox: Sandbox, task: Task, path: str) -> str | None:
    """The file's text, None when the verifier wrote none."""
    try:
        data = await sandbox.get_file(path)
    except FileNotFoundError:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise RewardFileError(f"task {task.name}: {path} is not UTF-8 text: {data[:200]!r}") from None


def read_reward(task: Task, reward_json: str | None, reward_txt: str | None) -> tuple[float | None, dict[str, float]]:
    """(reward, metrics) from the verifier's reward files (reward None: it wrote neither), or RewardFileError.

    This follows Harbor's ``Verifier._parse_reward_json`` (harbor src/harbor/verifier/verifier.py, as of
    its 2026 main): reward.json takes precedence over reward.txt; of its object, the numeric fields that
    are not bools count and the others are ignored; without a ``reward`` key, reward.txt's number becomes
    ``reward``; an empty file is an error. Harbor's ``reward`` is the trial's reward and the other numbers
    ride along; here too they are metrics, never added to it. Where Harbor would have no ``reward``: a
    single numeric key is the reward, several are refused (the task names its key: ``reward_key``).
    """
    if reward_json is None:
        return (None if reward_txt is None else _txt_reward(task, reward_txt)), {}
    data = _json_object(task, reward_json)
    key = task.reward_key or REWARD_KEY
    metrics = _metrics(data, leave_out=key)
    if key in data:
        return _finite(task, REWARD_JSON, key, data[key]), metrics
    if reward_txt is not None:  # Harbor: reward.json holds the report, reward.txt the score
        return _txt_reward(task, reward_txt), metrics
    numbers = [name for name, value in data.items() if _is_number(value)]
    if task.reward_key is None and len(numbers) == 1:
        return _finite(task, REWARD_JSON, numbers[0], data[numbers[0]]), {}
    raise RewardFileError(_no_reward_key(task, key, numbers))


def _no_reward_key(task: Task, key: str, numbers: list[str]) -> str:
    where = f"task {task.name}: {REWARD_JSON} has no key {key!r}"
    if task.reward_key is not None:
        return f"{where}, which the task names as its reward_key: write the reward there"
    found = f"{len(numbers)} numbers ({', '.join(repr(n) for n in numbers[:8])})" if numbers else "no number"
    return (
        f'{where} and {found}: write the reward as "reward" (the other keys are then metrics), or name '
        f'its key in task.toml: [verifier] reward_key = "..." (a JSONL task: "reward_key")'
    )


def _json_object(task: Task, text: str) -> dict:
    if not text.strip():
        raise RewardFileError(f"task {task.name}: {REWARD_JSON} is empty: the verifier must write its reward there")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise RewardFileError(
            f'task {task.name}: {REWARD_JSON} is not a JSON object such as {{"reward": 1.0}}: {text[:200]!r}'
        )
    return data


def _txt_reward(task: Task, text: str) -> float:
    if not text.strip():
        raise RewardFileError(f"task {task.name}: {REWARD_TXT} is empty: the verifier must write its reward there")
    try:
        value = float(text.strip())
    except ValueError:
        raise RewardFileError(f"task {task.name}: {REWARD_TXT} does not hold a number: {text[:200]!r}") from None
    return _finite(task, REWARD_TXT, "reward", value)


def _finite(task: Task, path: str, key: str, value: object) -> float:
    """The reward as a float; RewardFileError unless it is a finite number (not a bool, not a string)."""
    if not _finite_number(value):
        raise RewardFileError(
            f"task {task.name}: {path} gives the reward {key!r} as {json.dumps(value)[:100]}: "
            "a reward is a finite number (not a string, a bool, NaN or infinity)"
        )
    return float(value)


def _is_number(value: object) -> bool:
    """A JSON number that fits a float (a huge integer does not; bools are no numbers, as in Harbor)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _finite_number(value: object) -> bool:
    return _is_number(value) and math.isfinite(float(value))


def _metrics(data: dict, leave_out: str) -> dict[str, float]:
    """reward.json's finite numbers other than the reward; other fields are ignored, as Harbor does."""
    metrics = {}
    for name, value in data.items():
        if len(metrics) == MAX_METRICS:
            break
        if name != leave_out and _json_bytes(name) <= MAX_METRIC_NAME and _finite_number(value):
            metrics[name] = float(value)
    return metrics


def bounded_log(text: str, limit: int = MAX_LOG_BYTES) -> str:
    """The verifier's output whole, or its head and tail with a line saying how much was cut between
    them, within ``limit`` bytes of JSON (the form the rollout stores it in)."""
    if len(text) <= limit and _json_bytes(text) <= limit:
        return text
    keep = min(limit, len(text))
    while True:
        head = text[: int(keep * HEAD_SHARE)]
        tail = text[len(text) - (keep - len(head)) :]
        cut = len(text) - len(head) - len(tail)
        log = f"{head}\n[... {cut:,} characters of the verifier's output cut here ...]\n{tail}"
        if _json_bytes(log) <= limit:
            return log
        keep = int(keep * 0.75)  # escapes (control characters, non-ASCII) take more than a byte


def _json_bytes(text: str) -> int:
    return len(json.dumps(text))
