"""Tasks: what an agent is asked to do, the files it starts with, and how its work is verified.

Two forms load into the same record:
- Harbor task folders: ``instruction.md``, ``task.toml``, ``environment/Dockerfile``,
  ``tests/test.sh`` (writes ``/logs/verifier/reward.txt`` or ``reward.json``), optional
  ``solution/solve.sh``. The task's machine is its environment (`TaskEnvironment`): the Dockerfile
  built with ``environment/`` as its context, or ``[environment] docker_image``; the image's WORKDIR
  is where the agent starts and the verifier runs (harnesses/environments.py builds it). Our own
  shortcut for the built-in tasks, ``environment/workspace/`` (files copied into /workspace on the
  host's system or the harness image), has no environment;
- a compact JSONL form for small tasks, one object per line:
  ``{"name", "instruction", "files": {path: text}, "tests": {path: text}, "verifier": "sh command",
  "solution": "sh script", "timeout_s", "reward_file": false, "reward_key": null}``; its verifier's exit
  status is the reward unless ``reward_file`` says the verifier writes ``/logs/verifier/reward.txt`` or
  ``reward.json`` (see verify.py).

``reward_key`` (Harbor: ``[verifier] reward_key`` in task.toml) names the key of ``reward.json`` that
holds the reward when it is not ``reward``; the other keys are metrics (verify.py).

File paths (JSONL ``files``/``tests`` keys, the files of a Harbor folder) stay inside their folder:
an absolute path, a ``..`` or a symbolic link is a TaskError when the task loads.
"""

from __future__ import annotations

import json
import posixpath
import re
import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 120.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
SIZE_UNITS = {"": 1, "K": 2**-10, "M": 1, "G": 2**10, "T": 2**20}  # -> MiB
HARBOR_VERIFIER = "bash /tests/test.sh"
REWARD_SOURCES = ("file", "exit_code")
# Where the verifier runs (harnesses/grading/grade.py): a fresh sandbox holding only the agent's work, or the
# agent's own sandbox for a verifier that needs what the agent left outside its working directory.
GRADE_IN = ("fresh_sandbox", "agent_sandbox")


class TaskError(ValueError):
    """A task file or folder is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class TaskEnvironment:
    """A Harbor task's machine: how its image is made and what its sandbox may use (task.toml)."""

    context: Path | None  # the environment/ folder holding the Dockerfile (the build context); None: docker_image
    docker_image: str | None = None  # [environment] docker_image: a prebuilt image, used as is
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    cpus: float | None = None  # cores
    memory_mb: int | None = None  # MiB
    storage_mb: int | None = None  # MiB (not enforced by the sandboxes here; see docs/running.md)
    allow_internet: bool = False  # true only when task.toml says so; a run must then pass --allow-internet
    env: Mapping[str, str] = field(default_factory=dict)  # [environment] env, beside the image's own ENV


@dataclass(frozen=True)
class Task:
    name: str
    instruction: str  # what the agent is told
    files: Mapping[str, bytes] = field(default_factory=dict)  # workspace-relative path -> content
    tests: Mapping[str, bytes] = field(
        default_factory=dict
    )  # /tests-relative path -> content (uploaded after the agent)
    verifier: str = HARBOR_VERIFIER  # run in the workspace after the tests are uploaded
    solution: str | None = None  # reference solution (a shell script run in the workspace)
    dockerfile: str | None = None  # Harbor environment/Dockerfile: the image the task needs (docker)
    agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    verifier_timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S
    source: str = ""  # where it was loaded from
    reward_source: str | None = None  # "file" | "exit_code"; None: "file" for the Harbor verifier
    environment: TaskEnvironment | None = None  # a Harbor task's own machine; None: the workspace shortcut
    grade_in: str = "fresh_sandbox"  # [verifier] grade_in (a JSONL task's "grade_in"): one of GRADE_IN
    solution_files: Mapping[str, bytes] = field(default_factory=dict)  # solution/ (the oracle's), beside solve.sh
    verifier_env: Mapping[str, str] = field(default_factory=dict)  # [verifier] env
    solution_env: Mapping[str, str] = field(default_factory=dict)  # [solution] env
    reward_key: str | None = None  # [verifier] reward_key: reward.json's key of the reward; None: "reward"
    unhonoured: tuple[str, ...] = ()  # task.toml settings harnessrl ignores ("[environment] network_mode")

    def __post_init__(self) -> None:
        if self.reward_source is None:
            source = "file" if self.verifier == HARBOR_VERIFIER else "exit_code"
            object.__setattr__(self, "reward_source", source)
        if self.grade_in not in GRADE_IN:
            raise TaskError(f"task {self.name}: grade_in ([verifier] grade_in in task.toml) must be one of {GRADE_IN}")
        if self.reward_source not in REWARD_SOURCES:
            raise TaskError(f"task {self.name}: reward_source must be one of {REWARD_SOURCES}")
        if self.reward_key is not None and not (isinstance(self.reward_key, str) and self.reward_key):
            raise TaskError(
                f"task {self.name}: reward_key ([verifier] reward_key in task.toml, or a JSONL task's "
                f'"reward_key") must name a key of reward.json, as a string, not {self.reward_key!r}'
            )


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
            where = f"{path}:{number}"
            tasks.append(
                Task(
                    name=item["name"],
                    instruction=item["instruction"],
                    files={confined(k, f"{where} files"): v.encode() for k, v in item.get("files", {}).items()},
                    tests={confined(k, f"{where} tests"): v.encode() for k, v in item.get("tests", {}).items()},
                    verifier=item["verifier"],
                    solution=item.get("solution"),
                    reward_source="file" if item.get("reward_file") else "exit_code",
                    agent_timeout_s=float(item.get("timeout_s", DEFAULT_AGENT_TIMEOUT_S)),
                    verifier_timeout_s=float(item.get("verifier_timeout_s", DEFAULT_VERIFIER_TIMEOUT_S)),
                    source=f"{path}:{number}",
                    grade_in=item.get("grade_in", "fresh_sandbox"),
                    reward_key=item.get("reward_key"),
                )
            )
        except TaskError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TaskError(
                f"{path}:{number}: {type(exc).__name__}: {exc} (needs name, instruction, verifier)"
            ) from None
    return tasks


def load_harbor(folder: Path) -> Task:
    folder = Path(folder)
    config = _toml(folder / "task.toml")
    dockerfile = folder / "environment" / "Dockerfile"
    solution = folder / "solution" / "solve.sh"
    try:
        return Task(
            name=str(config.get("metadata", {}).get("name") or folder.name),
            instruction=(folder / "instruction.md").read_text(),
            files=_tree(folder / "environment" / "workspace"),
            tests=_tree(folder / "tests"),
            verifier=HARBOR_VERIFIER,
            solution=solution.read_text() if solution.exists() else None,
            dockerfile=dockerfile.read_text() if dockerfile.exists() else None,
            agent_timeout_s=float(_section(config, "agent").get("timeout_sec", DEFAULT_AGENT_TIMEOUT_S)),
            verifier_timeout_s=float(_section(config, "verifier").get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S)),
            source=str(folder),
            environment=_environment(folder, config),
            grade_in=_section(config, "verifier").get("grade_in", "fresh_sandbox"),
            solution_files=_tree(folder / "solution"),
            verifier_env=_env(config, "verifier", folder),
            solution_env=_env(config, "solution", folder),
            reward_key=_section(config, "verifier").get("reward_key"),
            unhonoured=unhonoured_settings(config),
        )
    except (ValueError, TypeError) as exc:
        if isinstance(exc, TaskError):
            raise
        raise TaskError(f"{folder / 'task.toml'}: {exc}") from None


# The task.toml settings harnessrl reads; any other (e.g. Harbor 1.3's [environment] network_mode, gpus,
# a [verifier] user) is named in a warning at `run` and `tasks check`, never dropped silently.
HONOURED = {
    "agent": {"timeout_sec"},
    "verifier": {"timeout_sec", "env", "grade_in", "reward_key"},
    "solution": {"env"},
    "environment": {
        *("docker_image", "build_timeout_sec", "cpus", "memory", "memory_mb", "storage", "storage_mb"),
        *("allow_internet", "env"),
    },
}
INFORMATIONAL = {"version", "metadata", "schema_version"}  # describe the task; nothing to honour


def unhonoured_settings(config: dict) -> tuple[str, ...]:
    """task.toml settings harnessrl does not apply, as "[section] key" (a top-level key: "key")."""
    found = []
    for key, value in config.items():
        if key in INFORMATIONAL:
            continue
        if key not in HONOURED or not isinstance(value, dict):
            found.append(key)
            continue
        found += [f"[{key}] {name}" for name in value if name not in HONOURED[key]]
    return tuple(found)


def unhonoured_warning(tasks: list[Task]) -> str | None:
    """One warning naming every task.toml setting of ``tasks`` that harnessrl ignores, with how many tasks
    set it; None when there is none."""
    counts = Counter(setting for task in tasks for setting in task.unhonoured)
    if not counts:
        return None
    listed = ", ".join(f"{setting} ({n} task{'' if n == 1 else 's'})" for setting, n in sorted(counts.items()))
    return f"warning: harnessrl does not honour these task.toml settings, which are ignored: {listed}"


def _environment(folder: Path, config: dict) -> TaskEnvironment | None:
    """The task's machine, or None for our environment/workspace/ shortcut (built-in tasks)."""
    section = _section(config, "environment")
    context = folder / "environment"
    image = section.get("docker_image")
    has_dockerfile = (context / "Dockerfile").is_file()
    if (context / "workspace").is_dir() and not image:
        return None
    if not has_dockerfile and not image:
        if context.exists() or section:
            raise TaskError(
                f"{folder}: the task has neither environment/Dockerfile nor "
                "[environment] docker_image in task.toml; add one of them"
            )
        return None
    return TaskEnvironment(
        context=context if has_dockerfile and not image else None,
        docker_image=str(image) if image else None,
        build_timeout_s=float(section.get("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S)),
        cpus=float(section["cpus"]) if section.get("cpus") else None,
        memory_mb=_mib(section, "memory", folder),
        storage_mb=_mib(section, "storage", folder),
        allow_internet=section.get("allow_internet") is True,
        env=_env(config, "environment", folder),
    )


def _section(config: dict, name: str) -> dict:
    section = config.get(name, {})
    if not isinstance(section, dict):
        raise TaskError(f"task.toml: [{name}] must be a table")
    return section


def _env(config: dict, name: str, folder: Path) -> dict[str, str]:
    env = _section(config, name).get("env", {})
    if not isinstance(env, dict):
        raise TaskError(f'{folder / "task.toml"}: [{name}] env must be a table of NAME = "value"')
    return {str(key): str(value) for key, value in env.items()}


def _mib(section: dict, key: str, folder: Path) -> int | None:
    """``memory_mb = 2048`` or the older ``memory = "2G"`` (K, M, G, T), in MiB."""
    if section.get(f"{key}_mb") is not None:
        return int(section[f"{key}_mb"])
    text = section.get(key)
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if match is None:
        raise TaskError(
            f"{folder / 'task.toml'}: [environment] {key} = {text!r} is not a size "
            f'such as "2G"; or give {key}_mb = 2048'
        )
    return max(1, int(float(match[1]) * SIZE_UNITS[match[2].upper()]))


def _toml(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: {exc}") from None


def _tree(root: Path) -> dict[str, bytes]:
    if root.is_symlink():
        raise TaskError(f"{root} is a symbolic link: a task's files must be real files inside its folder")
    if not root.is_dir():
        return {}
    files = {}
    for item in sorted(root.rglob("*")):
        if item.is_symlink():  # would upload whatever it points to on this host
            raise TaskError(f"{item} is a symbolic link: a task's files must be real files inside its folder")
        if item.is_file() and item.name != ".gitkeep":  # .gitkeep only keeps empty folders in git
            files[item.relative_to(root).as_posix()] = item.read_bytes()
    return files


def confined(key: str, where: str) -> str:
    """A task file's path, normalised; TaskError when it is absolute or leaves its folder."""
    normal = posixpath.normpath(key) if isinstance(key, str) and key else ""
    if not normal or key.startswith("/") or normal in (".", "..") or normal.startswith("../") or "\\" in key:
        raise TaskError(
            f"{where}: path {key!r} leaves the task's folder; use a relative path inside it (no leading /, no ..)"
        )
    return normal


def builtin_tasks_path() -> Path:
    """The built-in task set shipped with harnessrl (JSONL tasks and Harbor folders)."""
    return Path(__file__).parent / "tasks"
