"""Agents that try to run code inside the verifier, and the tasks they attack.

The task asks for 42 in answer.txt; the agent writes 41 (a wrong solution), then plants something the
verifier's Python or bash would load. The verifier's true reward is 0; any other is a subverted verifier.
The pytest task (a Harbor task whose image has pytest) asks for ``double`` in calc.py, which its test
imports from the working directory: planted modules beside a wrong calc.py must not pass it, and a
right calc.py must.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harnesses.environments import Environments
from harnesses.grading.grade import grade
from harnesses.grading.verify import Verdict
from harnesses.task import Task, load_harbor
from sandboxes import Sandbox, SandboxSpec, create_sandbox
from tests.integration.backends import backend_spec, create_backend

CHECK_PY = b"import sys\nsys.exit(0 if open('answer.txt').read().strip() == '42' else 1)\n"
CHECK_SH = b'#!/bin/bash\n[ "$(cat answer.txt)" = 42 ]\n'
# A login shell, as verifiers that take PATH from a profile (conda, nvm) start one.
LOGIN_VERIFIER = "bash -lc 'bash /tests/check.sh'"
PYTHON_VERIFIER = "python3 /tests/check.py"

# A module that makes any check pass; in the working directory, first on `python3 -c`'s and `-m`'s path.
TAKEOVER = "printf 'import os\\nos._exit(0)\\n' >"
JSON_VERIFIER = "python3 -c \"import json, sys; sys.exit(0 if json.load(open('answer.txt')) == 42 else 1)\""
UNITTEST_VERIFIER = "python3 -m unittest discover -s /tests -p 'test_*.py'"
TEST_ANSWER = b"""import unittest


class Answer(unittest.TestCase):
    def test_answer(self):
        self.assertEqual(open("answer.txt").read().strip(), "42")
"""

USER_SITE = 'python3 -c "import os, site; d = site.getusersitepackages(); os.makedirs(d, exist_ok=True); print(d)"'
ATTACKS = {  # name -> (what the agent runs, the verifier it subverts)
    "usercustomize.py": (
        f'd=$({USER_SITE}) && printf "import os\\nos._exit(0)\\n" > "$d/usercustomize.py"',
        PYTHON_VERIFIER,
    ),
    ".pth": (f'd=$({USER_SITE}) && echo "import os; os._exit(0)" > "$d/zz-own.pth"', PYTHON_VERIFIER),
    "BASH_ENV": (
        "echo 'exit 0' > $HOME/.own && echo 'export BASH_ENV=$HOME/.own' > $HOME/.bash_profile",
        LOGIN_VERIFIER,
    ),
    "LD_PRELOAD": (
        "cp own.so $HOME/own.so && echo 'export LD_PRELOAD=$HOME/own.so' > $HOME/.bash_profile",
        LOGIN_VERIFIER,
    ),
    "json.py": (f"{TAKEOVER} json.py", JSON_VERIFIER),
    "unittest.py": (f"{TAKEOVER} unittest.py", UNITTEST_VERIFIER),
}

# Exits 0 from every program started once the verifier's tests are in place.
OWN_LIBRARY = r"""
#include <unistd.h>
__attribute__((constructor)) static void own(void) {
    if (access("/tests/check.sh", F_OK) == 0 || access("/tests/check.py", F_OK) == 0
        || access("/tests/test.sh", F_OK) == 0)
        _exit(0);
}
"""


def own_library(folder: Path) -> bytes | None:
    """The agent's preload library, built with the host's cc (glibc symbols of 2.2.5: any glibc image
    loads it); None without a compiler."""
    if shutil.which("cc") is None:
        return None
    (folder / "own.c").write_text(OWN_LIBRARY)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(folder / "own.so"), str(folder / "own.c")], check=True)
    return (folder / "own.so").read_bytes()


def wrong_answer_task(verifier: str, grade_in: str) -> Task:
    return Task(
        name="answer-42",
        instruction="Write 42 into answer.txt.",
        files={"answer.txt": b"0\n"},
        tests={"check.py": CHECK_PY, "check.sh": CHECK_SH, "test_answer.py": TEST_ANSWER},
        verifier=verifier,
        reward_source="exit_code",
        grade_in=grade_in,
    )


def sandbox_kind(backend: str) -> tuple[str, dict]:
    """create_sandbox's kind and options for a backend of tests/integration/backends.py (or harbor:<type>)."""
    if backend == "docker" or backend.startswith("harbor:"):
        return backend, {}
    return "local", {"isolation": "bwrap"}


async def graded(backend: str, agent: Sandbox, task: Task, environments: Environments | None = None) -> Verdict:
    """The verdict as the runner reaches it: in the fresh sandbox the task allows, else the agent's."""
    kind, options = sandbox_kind(backend)
    fresh = await (environments or Environments()).grading_spec(task, kind, agent.spec)
    return await grade(kind, agent, task, fresh, options)


async def attacked_verdict(backend: str, spec: SandboxSpec, task: Task, plant: str, library: bytes | None) -> Verdict:
    """A wrong answer, then the attack planted by the agent; the verifier's verdict."""
    async with await create_backend(backend, spec) as agent:
        if library is not None:
            await agent.put_file("own.so", library)
        wrote = await agent.exec(f"echo 41 > answer.txt && {plant}", timeout_s=60)
        assert wrote.ok, wrote.text()
        return await graded(backend, agent, task)


# A verifier comparing the answer to its expected file under /tests, Terminal-Bench's common shape: a link
# the agent leaves there (the tests are not there yet) would hand the verifier its own file.
CMP_VERIFIER = "cmp -s answer.txt /tests/expected.txt"
PYTHON_CMP = "python3 -c \"import sys; sys.exit(open('answer.txt').read() != open('/tests/expected.txt').read())\""
NO_ANSWER = "rm -f answer.txt && "
LINK_ATTACKS = {  # name -> (what the agent runs instead of answering, the verifier it fools)
    "absolute": (f"{NO_ANSWER}ln -s /tests/expected.txt answer.txt", CMP_VERIFIER),
    "absolute, python": (f"{NO_ANSWER}ln -s /tests/expected.txt answer.txt", PYTHON_CMP),
    "relative": (f"{NO_ANSWER}ln -s ../tests/expected.txt answer.txt", CMP_VERIFIER),  # the workspace is /workspace
    "chain": (f"{NO_ANSWER}ln -s /tests/expected.txt .hop && ln -s .hop answer.txt", CMP_VERIFIER),
    "chain through /tmp": (f"{NO_ANSWER}ln -s /tests/expected.txt /tmp/hop && ln -s /tmp/hop answer.txt", CMP_VERIFIER),
    "folder": (f"{NO_ANSWER}ln -s /tests t && ln -s t/expected.txt answer.txt", CMP_VERIFIER),
}
HONEST_LINK = f"{NO_ANSWER}mkdir -p out && echo 42 > out/answer.txt && ln -s out/answer.txt answer.txt"


def compare_task(verifier: str, grade_in: str) -> Task:
    return Task(
        name="compare-42",
        instruction="Write 42 into answer.txt.",
        files={"answer.txt": b"0\n"},
        tests={"expected.txt": b"42\n"},
        verifier=verifier,
        reward_source="exit_code",
        grade_in=grade_in,
    )


async def linked_verdict(backend: str, spec: SandboxSpec, task: Task, plant: str) -> Verdict:
    """What the agent leaves in its workspace (links), then the verifier's verdict (any backend here,
    harbor:<type> too)."""
    kind, options = sandbox_kind(backend)
    async with await create_sandbox(kind, spec, **options) as agent:
        done = await agent.exec(plant, timeout_s=60)
        assert done.ok, done.text()
        return await graded(backend, agent, task)


# The pytest task: its test imports the agent's calc module from the working directory, as most do.
WRONG_CALC = "printf 'def double(x):\\n    return x\\n' > calc.py"
RIGHT_CALC = "printf 'def double(x):\\n    return 2 * x\\n' > calc.py"
PYTEST_ATTACKS = {  # name -> what the agent plants beside its wrong calc.py
    "pytest.py": f"{TAKEOVER} pytest.py",
    "_pytest": f"mkdir _pytest && {TAKEOVER} _pytest/__init__.py",
    # packaging metadata registering a plugin that pytest imports at start-up
    "plugin entry point": (
        f"{TAKEOVER} own.py && mkdir own-1.0.dist-info && cd own-1.0.dist-info && "
        "printf 'Metadata-Version: 2.1\\nName: own\\nVersion: 1.0\\n' > METADATA && "
        "printf '[pytest11]\\nown = own\\n' > entry_points.txt"
    ),
    # pytest reads no conftest.py or ini file of the working directory while the tests are in /tests
    "conftest.py": f"{TAKEOVER} conftest.py && {TAKEOVER} own.py && printf '[pytest]\\naddopts = -p own\\n' > pytest.ini",
}
# The layers of tests/fixtures/harbor_public/pytest-stats, so the engine's cache builds it at once.
PYTEST_DOCKERFILE = """FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
        python3 python3-pytest \\
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
"""
PYTEST_TEST_SH = """#!/bin/bash
if python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py; then reward=1; else reward=0; fi
echo $reward > /logs/verifier/reward.txt
"""
TEST_OUTPUTS = "from calc import double\n\n\ndef test_double():\n    assert double(21) == 42\n"


def pytest_task(folder: Path, grade_in: str) -> Task:
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(PYTEST_DOCKERFILE)
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text(PYTEST_TEST_SH)
    (folder / "tests" / "test_outputs.py").write_text(TEST_OUTPUTS)
    (folder / "instruction.md").write_text("Write double(x) in /app/calc.py.\n")
    toml = f'version = "1.0"\n[metadata]\nname = "pytest-calc"\n[verifier]\ngrade_in = "{grade_in}"\n'
    (folder / "task.toml").write_text(toml)
    return load_harbor(folder)


async def pytest_verdict(folder: Path, backend: str, grade_in: str, solution: str) -> Verdict:
    """The pytest task's verdict on what `solution` (a shell command in /app) leaves there."""
    task, environments = pytest_task(folder, grade_in), Environments()
    kind, _ = sandbox_kind(backend)
    spec = await environments.sandbox_spec(task, "oracle", kind, backend_spec(backend, name="pytest-calc"))
    async with await create_backend(backend, spec) as agent:
        done = await agent.exec(solution, timeout_s=60)
        assert done.ok, done.text()
        return await graded(backend, agent, task, environments)


# A right calc.py, and verifiers importing it from the working directory on the plain image.
OWN_MODULE_VERIFIERS = {
    "python3 -c": "python3 -c 'import sys; from calc import double; sys.exit(0 if double(21) == 42 else 1)'",
    "python3 -m unittest": "python3 -m unittest discover -s /tests -p 'test_calc.py'",
}
TEST_CALC = b"""import unittest

from calc import double


class Double(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(21), 42)
"""


def calc_task(verifier: str, grade_in: str) -> Task:
    return Task(
        name="calc",
        instruction="Write double(x) in calc.py.",
        tests={"test_calc.py": TEST_CALC},
        verifier=verifier,
        reward_source="exit_code",
        grade_in=grade_in,
    )
