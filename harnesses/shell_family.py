"""``builtin:shell``: small jobs a coding agent does with one to three shell commands, for real agents.

Each task asks for a change to the working directory (write a file, count matching lines, make a folder,
copy, rename, sort, replace a word, append a line, count lines) and is graded by ``check.py`` on the
files the agent leaves, never on its reply. Every task carries its reference solution, the shell
commands a careful agent would run: ``harnessrl.teachers.demonstrations`` plays it as the agent's own tool call
for a warm start, and ``harnessrl tasks check`` proves each task sound (the solution passes, doing
nothing fails).

Instances differ in their words, file names and numbers; the train and test splits are by task name
(``harnesses.splits.split_of``). ``builtin:shell-unseen`` is a kind of job the family never trains
on (the first lines of a file into another): evaluated apart, it says whether what was learned carries
beyond new instances of known kinds.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from harnesses.splits import split_of
from harnesses.task import Task

TRAIN_PER_KIND = 6  # instances of each kind in the train split of builtin:shell
TEST_PER_KIND = 2  # and in its test split
UNSEEN_PER_KIND = 4  # instances of the kind it never holds (builtin:shell-unseen)
WORDS = (
    "apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "ocean", "candle",
    "garden", "silver", "rocket", "forest", "pepper", "window", "butter", "planet", "violet", "copper",
    "meadow", "falcon", "harbor", "pebble", "orange", "winter", "summer", "marble", "castle", "thunder",
)  # fmt: skip
NAMES = (
    "notes", "report", "draft", "items", "list", "words", "data", "log", "todo", "names",
    "input", "story", "colors", "fruits", "plan", "ideas",
)  # fmt: skip

# The verifier: `python3 /tests/check.py KIND ARGS...` in the working directory; exit 0 is a pass.
CHECK = """import pathlib, sys

kind, args = sys.argv[1], sys.argv[2:]


def text(path):
    p = pathlib.Path(path)
    return p.read_text() if p.is_file() else None


def lines(path):
    t = text(path)
    return None if t is None else t.splitlines()


def same_text(path, want):
    t = text(path)
    return t is not None and t.strip() == want.strip()


def number_in(path, want):
    t = text(path)
    return t is not None and t.split() == [want]


if kind == "write":
    ok = same_text(args[0], args[1])
elif kind == "count":
    ok = number_in(args[0], args[1])
elif kind == "folder":
    ok = pathlib.Path(args[0]).is_dir() and same_text(args[0] + "/" + args[1], args[2])
elif kind == "copy":
    ok = text(args[1]) is not None and text(args[1]) == text(args[0])
elif kind == "rename":
    ok = text(args[0]) is None and same_text(args[1], args[2].replace("|", "\\n"))
elif kind == "sort":
    ok = lines(args[1]) == sorted(lines(args[0]) or [None])
elif kind == "replace":
    ok = lines(args[0]) == args[1].split("|")
elif kind == "append":
    ok = lines(args[0]) == args[1].split("|")
elif kind == "head":
    ok = lines(args[1]) == (lines(args[0]) or [])[: int(args[2])] and lines(args[1]) != []
else:
    sys.exit(f"unknown kind {kind}")
sys.exit(0 if ok else 1)
"""


@dataclass(frozen=True)
class Job:
    """One instance of a kind: what the agent is told, its files, how it is checked and solved."""

    instruction: str
    files: dict[str, str]  # workspace-relative path -> text
    check: tuple[str, ...]  # check.py's arguments (kind first)
    solution: str  # shell commands


def _words(rng: random.Random, n: int) -> list[str]:
    return rng.sample(WORDS, n)


def _file_of(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def write(rng: random.Random) -> Job:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    return Job(
        f"Create the file {name}.txt containing exactly the word {word}.",
        {},
        ("write", f"{name}.txt", word),
        f"echo {word} > {name}.txt",
    )


def count(rng: random.Random) -> Job:
    word = rng.choice(WORDS)
    others = [w for w in WORDS if w != word]
    rows = [f"{rng.choice(others)} {word} {rng.choice(others)}" for _ in range(rng.randint(1, 5))]
    rows += [f"{rng.choice(others)} {rng.choice(others)}" for _ in range(rng.randint(1, 5))]
    rng.shuffle(rows)
    name = rng.choice(NAMES)
    hits = str(sum(word in row.split() for row in rows))
    return Job(
        f"Count the lines of {name}.txt that contain the word {word} and write the count to count.txt.",
        {f"{name}.txt": _file_of(rows)},
        ("count", "count.txt", hits),
        f"grep -c {word} {name}.txt > count.txt",
    )


def folder(rng: random.Random) -> Job:
    box, name, word = rng.choice(WORDS), rng.choice(NAMES), rng.choice(WORDS)
    return Job(
        f"Make a folder named {box} with a file {name}.txt in it containing the word {word}.",
        {},
        ("folder", box, f"{name}.txt", word),
        f"mkdir -p {box} && echo {word} > {box}/{name}.txt",
    )


def copy(rng: random.Random) -> Job:
    src, dst = rng.sample(NAMES, 2)
    return Job(
        f"Copy the file {src}.txt to {dst}.txt.",
        {f"{src}.txt": _file_of(_words(rng, 3))},
        ("copy", f"{src}.txt", f"{dst}.txt"),
        f"cp {src}.txt {dst}.txt",
    )


def rename(rng: random.Random) -> Job:
    src, dst = rng.sample(NAMES, 2)
    rows = _words(rng, 2)
    return Job(
        f"Rename the file {src}.txt to {dst}.txt.",
        {f"{src}.txt": _file_of(rows)},
        ("rename", f"{src}.txt", f"{dst}.txt", "|".join(rows)),
        f"mv {src}.txt {dst}.txt",
    )


def sort(rng: random.Random) -> Job:
    src, dst = rng.sample(NAMES, 2)
    return Job(
        f"Sort the lines of {src}.txt alphabetically into a new file {dst}.txt.",
        {f"{src}.txt": _file_of(_words(rng, rng.randint(3, 6)))},
        ("sort", f"{src}.txt", f"{dst}.txt"),
        f"sort {src}.txt > {dst}.txt",
    )


def replace(rng: random.Random) -> Job:
    name = rng.choice(NAMES)
    old, new, *rest = _words(rng, 5)
    rows = [f"{rest[0]} {old}", f"{old} {rest[1]}", rest[2]]
    want = [row.replace(old, new) for row in rows]
    return Job(
        f"In the file {name}.txt, replace every {old} with {new}.",
        {f"{name}.txt": _file_of(rows)},
        ("replace", f"{name}.txt", "|".join(want)),
        f"sed -i 's/{old}/{new}/g' {name}.txt",
    )


def append(rng: random.Random) -> Job:
    name = rng.choice(NAMES)
    *rows, word = _words(rng, rng.randint(3, 5))
    return Job(
        f"Add the line {word} to the end of the file {name}.txt.",
        {f"{name}.txt": _file_of(rows)},
        ("append", f"{name}.txt", "|".join([*rows, word])),
        f"echo {word} >> {name}.txt",
    )


def head(rng: random.Random) -> Job:
    src, dst = rng.sample(NAMES, 2)
    rows, n = _words(rng, rng.randint(4, 7)), rng.randint(2, 3)
    return Job(
        f"Write the first {n} lines of {src}.txt to a new file {dst}.txt.",
        {f"{src}.txt": _file_of(rows)},
        ("head", f"{src}.txt", f"{dst}.txt", str(n)),
        f"head -n {n} {src}.txt > {dst}.txt",
    )


KINDS: dict[str, Callable[[random.Random], Job]] = {
    "write": write,
    "count": count,
    "folder": folder,
    "copy": copy,
    "rename": rename,
    "sort": sort,
    "replace": replace,
    "append": append,
}
UNSEEN_KINDS: dict[str, Callable[[random.Random], Job]] = {"head": head}


def shell_task(name: str, job: Job, source: str) -> Task:
    return Task(
        name=name,
        instruction=job.instruction,
        files={path: text.encode() for path, text in job.files.items()},
        tests={"check.py": CHECK.encode()},
        verifier="python3 /tests/check.py " + shlex.join(job.check),
        solution=job.solution,
        agent_timeout_s=300.0,
        verifier_timeout_s=30.0,
        source=source,
    )


def shell_tasks(
    train: int = TRAIN_PER_KIND, test: int = TEST_PER_KIND, seed: int = 0, kinds: dict | None = None
) -> list[Task]:
    """Distinct instances (by instruction) of each kind, named ``shell-<kind>-<n>``: ``train`` of them in
    the train split and ``test`` in the test split (``harnesses.splits.split_of``, by name)."""

    tasks = []
    for kind, make in (kinds or KINDS).items():
        rng, seen, left = random.Random(f"{seed}-{kind}"), set(), {"train": train, "test": test}
        while any(left.values()):
            job, name = make(rng), f"shell-{kind}-{len(seen) + 1:02d}"
            if job.instruction in seen:
                continue
            seen.add(job.instruction)
            if left[split := split_of(name)]:
                left[split] -= 1
                tasks.append(shell_task(name, job, f"shell family, seed {seed}"))
    return tasks


def unseen_shell_tasks(count: int = UNSEEN_PER_KIND, seed: int = 0) -> list[Task]:
    """The kinds ``builtin:shell`` never holds, a whole held-out kind: ``count`` instances of each, in
    either split (evaluate them with ``--split all``)."""
    tasks = []
    for kind, make in UNSEEN_KINDS.items():
        rng, jobs = random.Random(f"{seed}-{kind}"), {}
        while len(jobs) < count:
            job = make(rng)
            jobs.setdefault(job.instruction, job)
        source = f"shell family (unseen kinds), seed {seed}"
        tasks += [shell_task(f"shell-{kind}-{n:02d}", job, source) for n, job in enumerate(jobs.values(), 1)]
    return tasks
