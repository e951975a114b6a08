"""Agents that try to run code inside the verifier, and the task they attack.

The task asks for 42 in answer.txt; the agent writes 41 (a wrong solution), then plants something the
verifier's Python or bash would load. The verifier's true reward is 0; any other is a subverted verifier.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harnesses.environments import Environments
from harnesses.grading import grade
from harnesses.task import Task
from harnesses.verify import Verdict
from sandboxes import Sandbox, SandboxSpec
from tests.integration.backends import create_backend

CHECK_PY = b"import sys\nsys.exit(0 if open('answer.txt').read().strip() == '42' else 1)\n"
CHECK_SH = b'#!/bin/bash\n[ "$(cat answer.txt)" = 42 ]\n'
# A login shell, as verifiers that take PATH from a profile (conda, nvm) start one.
LOGIN_VERIFIER = "bash -lc 'bash /tests/check.sh'"
PYTHON_VERIFIER = "python3 /tests/check.py"

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
        tests={"check.py": CHECK_PY, "check.sh": CHECK_SH},
        verifier=verifier,
        reward_source="exit_code",
        grade_in=grade_in,
    )


def sandbox_kind(backend: str) -> tuple[str, dict]:
    """create_sandbox's kind and options for a backend of tests/integration/backends.py."""
    return ("docker", {}) if backend == "docker" else ("local", {"isolation": "bwrap"})


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
