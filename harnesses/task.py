"""Tasks: what an agent is asked to do, the files it starts with, and how its work is verified.

Two forms load into the same record:
- Harbor task folders: ``instruction.md``, ``task.toml``, ``environment/Dockerfile``,
  ``tests/test.sh`` (writes ``/logs/verifier/reward.txt`` or ``reward.json``), optional
  ``solution/solve.sh``;
- a compact JSONL form for small tasks, one object per line:
  ``{"name", "instruction", "files": {path: text}, "tests": {path: text}, "verifier": "sh command",
  "solution": "sh script", "timeout_s"}``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 120.0
HARBOR_VERIFIER = "bash /tests/test.sh"


class TaskError(ValueError):
    """A task file or folder is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Task:
    name: str
    instruction: str  # what the agent is told
    files: Mapping[str, bytes] = field(default_factory=dict)  # workspace-relative path -> content
    tests: Mapping[str, bytes] = field(default_factory=dict)  # /tests-relative path -> content (uploaded after the agent)
    verifier: str = HARBOR_VERIFIER  # run in the workspace after the tests are uploaded
    solution: str | None = None  # reference solution (a shell script run in the workspace)
    dockerfile: str | None = None  # Harbor environment/Dockerfile: the image the task needs (docker)
    agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    verifier_timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S
    source: str = ""  # where it was loaded from


def load_tasks(path: Path) -> list[Task]:
    """Tasks from a JSONL file, a Harbor task folder, or a folder of either (sorted by name)."""
    path = Path(path)
    if not path.exists():
        raise TaskError(f"{path} does not exist; give --tasks a .jsonl file or a folder of Harbor tasks")
    if path.is_file():
        return load_jsonl(path)
    if (path / "instruction.md").exists():
        return [load_harbor(path)]
    tasks = []
    for child in sorted(path.iterdir()):
        if child.suffix == ".jsonl" or (child.is_dir() and not child.name.startswith(".")):
            tasks += load_tasks(child)  # a task folder, or a folder of them
    names = [t.name for t in tasks]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise TaskError(f"task names must be unique under {path}: {duplicates}")
    return sorted(tasks, key=lambda t: t.name)


def load_jsonl(path: Path) -> list[Task]:
    tasks = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            tasks.append(Task(
                name=item["name"], instruction=item["instruction"],
                files={k: v.encode() for k, v in item.get("files", {}).items()},
                tests={k: v.encode() for k, v in item.get("tests", {}).items()},
                verifier=item["verifier"], solution=item.get("solution"),
                agent_timeout_s=float(item.get("timeout_s", DEFAULT_AGENT_TIMEOUT_S)),
                verifier_timeout_s=float(item.get("verifier_timeout_s", DEFAULT_VERIFIER_TIMEOUT_S)),
                source=f"{path}:{number}",
            ))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TaskError(f"{path}:{number}: {type(exc).__name__}: {exc} (needs name, instruction, verifier)") from None
    return tasks


def load_harbor(folder: Path) -> Task:
    config = _toml(folder / "task.toml")
    dockerfile = folder / "environment" / "Dockerfile"
    solution = folder / "solution" / "solve.sh"
    return Task(
        name=str(config.get("metadata", {}).get("name") or folder.name),
        instruction=(folder / "instruction.md").read_text(),
        files=_tree(folder / "environment" / "workspace"),
        tests=_tree(folder / "tests"),
        verifier=HARBOR_VERIFIER,
        solution=solution.read_text() if solution.exists() else None,
        dockerfile=dockerfile.read_text() if dockerfile.exists() else None,
        agent_timeout_s=float(config.get("agent", {}).get("timeout_sec", DEFAULT_AGENT_TIMEOUT_S)),
        verifier_timeout_s=float(config.get("verifier", {}).get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S)),
        source=str(folder),
    )


def _toml(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: {exc}") from None


def _tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".gitkeep"}  # .gitkeep only keeps empty folders in git


def builtin_tasks_path() -> Path:
    """The built-in task set shipped with harnessrl (JSONL tasks and Harbor folders)."""
    return Path(__file__).parent / "tasks"
