"""Datasets: which tasks a command runs (``--tasks``, ``--include`` / ``--exclude``, ``--split``).

``--tasks`` names one source:
- a folder of Harbor tasks, nested as deep as a dataset keeps them (``datasets/<suite>/<task>/``), or of
  JSONL files; a single Harbor task folder;
- a JSONL file (one task per line);
- a list file: one path per line (a task folder, a folder of tasks or a JSONL file), relative to the
  list file's folder; blank lines and ``#`` comments are skipped;
- ``builtin:arithmetic`` (the generated family quickstart trains on), ``builtin:shell`` (shell jobs for
  real agents, ``make demo``'s) and ``builtin:shell-unseen`` (a kind of shell job it never holds), or
  ``builtin:tasks`` (the 32 small tasks shipped in ``harnesses/tasks``);
- ``harbor:SPEC`` / ``hf:ORG/NAME``: what OpenEnv's Harbor resolution takes (a folder, a Hugging Face
  dataset repo, a registry ``NAME@VERSION``; see harnesses/openenv/datasets.py);
- ``openenv:SPEC``: an OpenEnv environment's own tasks (a server URL, ``MODULE:CLASS``, an image; see
  harnesses/openenv/tasks.py).

The split is a property of a task's name alone (harnesses/splits.py), so a task keeps it whatever else
the dataset holds and training on ``--split train`` never sees a task ``--split test`` evaluates.
``--include`` / ``--exclude`` are shell globs over task names (``fnmatch``); they never move a task from
one split to the other.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harnesses.openenv.datasets import is_openenv_dataset, load_openenv_dataset
from harnesses.openenv.tasks import is_openenv_tasks, load_openenv_tasks
from harnesses.splits import DEFAULT_TEST_FRACTION, SPLITS, split_of
from harnesses.task import Task, TaskError, builtin_tasks_path, load_tasks

ARITHMETIC_TASKS = 20  # the built-in family's size: ~16 train, ~4 held out at the default fraction
BUILTIN_PREFIX = "builtin:"


def _arithmetic() -> list[Task]:
    """The arithmetic family without repeated questions: a held-out task never asks a training one's."""
    from harnesses.families import arithmetic_tasks

    unique: dict[str, Task] = {}
    for task in arithmetic_tasks(4 * ARITHMETIC_TASKS):
        unique.setdefault(task.instruction, task)
    return list(unique.values())[:ARITHMETIC_TASKS]


def _two_digit() -> list[Task]:
    """Two-digit sums, a family SmolLM2 scores ~0 on (`quickstart --warm-start`'s)."""
    from harnesses.families import two_digit_tasks

    return two_digit_tasks(ARITHMETIC_TASKS)


def _shell() -> list[Task]:
    """Shell jobs for real agents (harnesses/shell_family.py)."""
    from harnesses.shell_family import shell_tasks

    return shell_tasks()


def _shell_unseen() -> list[Task]:
    """A kind of shell job ``builtin:shell`` never holds, evaluated apart."""
    from harnesses.shell_family import unseen_shell_tasks

    return unseen_shell_tasks()


BUILTIN: dict[str, Callable[[], list[Task]]] = {
    "arithmetic": _arithmetic,
    "shell": _shell,
    "shell-unseen": _shell_unseen,
    "tasks": lambda: load_tasks(builtin_tasks_path()),
    "two-digit": _two_digit,
}


@dataclass(frozen=True)
class Selection:
    """What to take from a source: name globs and a split."""

    include: tuple[str, ...] = ()  # task name globs; empty: every task
    exclude: tuple[str, ...] = ()
    split: str = "all"  # all | train | test
    test_fraction: float = DEFAULT_TEST_FRACTION  # share of task names (by hash) in the test split

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise TaskError(f"--split must be one of {', '.join(SPLITS)}, not {self.split!r}")
        if not 0.0 <= self.test_fraction <= 1.0:
            raise TaskError(f"--test-fraction must be between 0 and 1, not {self.test_fraction}")

    def describe(self) -> str:
        parts = [] if self.split == "all" else [f"split {self.split} (test fraction {self.test_fraction:g})"]
        parts += [f"include {' '.join(self.include)}"] if self.include else []
        parts += [f"exclude {' '.join(self.exclude)}"] if self.exclude else []
        return ", ".join(parts) or "every task"


def select(tasks: Sequence[Task], selection: Selection) -> list[Task]:
    """The tasks the globs and the split keep, in their order."""
    return [task for task in tasks if _kept(task.name, selection)]


def _kept(name: str, selection: Selection) -> bool:
    if selection.include and not any(fnmatch.fnmatchcase(name, glob) for glob in selection.include):
        return False
    if any(fnmatch.fnmatchcase(name, glob) for glob in selection.exclude):
        return False
    return selection.split == "all" or split_of(name, selection.test_fraction) == selection.split


def load_dataset(source: str | Path) -> list[Task]:
    """Every task of a source (see the module's docstring), sorted by name; names must be unique."""
    text = str(source)
    if text.startswith(BUILTIN_PREFIX):
        name = text.removeprefix(BUILTIN_PREFIX)
        if name not in BUILTIN:
            raise TaskError(
                f"unknown built-in dataset {text!r}: use one of {', '.join(BUILTIN_PREFIX + n for n in BUILTIN)}"
            )
        tasks = BUILTIN[name]()
    elif is_openenv_dataset(text):  # harbor:SPEC, hf:ORG/NAME, resolved by OpenEnv (harnesses/openenv/datasets.py)
        tasks = load_openenv_dataset(text)
    elif is_openenv_tasks(text):  # openenv:SPEC, an environment's own tasks (harnesses/openenv/tasks.py)
        tasks = load_openenv_tasks(text)
    else:
        path = Path(source)
        tasks = _list_file(path) if _is_list_file(path) else load_tasks(path)
    return _unique(sorted(tasks, key=lambda t: t.name), text)


def load_selection(source: str | Path, selection: Selection) -> list[Task]:
    """The selected tasks of a source; a TaskError naming the fix when none is left."""
    tasks = load_dataset(source)
    chosen = select(tasks, selection)
    if not chosen:
        raise TaskError(
            f"no task of {source} ({len(tasks)} tasks) is left after {selection.describe()}: "
            f"loosen --include/--exclude, or change --split/--test-fraction"
        )
    return chosen


def _is_list_file(path: Path) -> bool:
    if not path.is_file() or path.suffix == ".jsonl":
        return False
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return not _is_json_object(line)
    return True  # only comments: an empty list


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _list_file(path: Path) -> list[Task]:
    tasks = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        target = (path.parent / entry) if not Path(entry).is_absolute() else Path(entry)
        if not target.exists():
            raise TaskError(f"{path}:{number}: {entry} does not exist (paths are relative to the list file)")
        tasks += load_tasks(target)
    return tasks


def _unique(tasks: list[Task], source: str) -> list[Task]:
    counts = Counter(t.name for t in tasks)
    if duplicates := sorted(name for name, n in counts.items() if n > 1):
        raise TaskError(f"task names must be unique in {source}: {duplicates} appear more than once")
    return tasks
