"""`harnessrl tasks check` on real sandboxes: the public-style dataset is sound on docker and on
bubblewrap (oracle 1, doing nothing 0), and broken tasks are named with their reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.environments import Environments
from harnesses.task import load_tasks
from rollouts.checks import CheckSettings, check_tasks
from sandboxes.kinds import KINDS

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public"
SANDBOXES = ["docker", "local"]


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_tasks_check_scores_the_public_style_dataset_oracle_one_and_do_nothing_zero(sandbox):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harnessrl.cli",
            "tasks",
            "check",
            str(DATASET),
            "--sandbox",
            sandbox,
            "--concurrency",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "6 of 6 tasks sound" in output
    for task in ("backup-script", "csv-total", "fix-greeting", "json-config", "log-errors", "pytest-stats"):
        assert f"{task}: ok" in output


def harbor_task(root: Path, name: str, dockerfile: str, test: str, solve: str, toml: str = "") -> None:
    folder = root / name
    for sub in ("environment", "tests", "solution"):
        (folder / sub).mkdir(parents=True)
    (folder / "instruction.md").write_text("Write 1 to /app/out.txt.\n")
    (folder / "task.toml").write_text(f'version = "1.0"\n{toml}')
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n" + test)
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)


BASE = "FROM debian:bookworm-slim\nWORKDIR /app\n"
GOOD_TEST = 'if [ "$(cat /app/out.txt 2>/dev/null)" = 1 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_tasks_check_names_each_broken_task_and_its_reason(tmp_path, sandbox):
    harbor_task(tmp_path, "sound", BASE, GOOD_TEST, "echo 1 > /app/out.txt\n")
    harbor_task(
        tmp_path,
        "relative-paths",
        "FROM debian:bookworm-slim\nENV HOME=/root\nWORKDIR /srv/work\n",
        'if [ "$(cat out.txt)" = 1 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n',
        "echo 1 > out.txt\n",
    )  # the solution and the verifier both run in the image's WORKDIR
    harbor_task(tmp_path, "no-build", BASE + "RUN exit 3\n", GOOD_TEST, "echo 1 > /app/out.txt\n")
    harbor_task(tmp_path, "checks-nothing", BASE, "echo 1 > /logs/verifier/reward.txt\n", "true\n")
    unpullable = "FROM registry.example.invalid/team/base:1.0\nWORKDIR /app\n"
    harbor_task(tmp_path, "unpullable-base", unpullable, GOOD_TEST, "echo 1 > /app/out.txt\n")
    harbor_task(tmp_path, "wrong-solution", BASE, GOOD_TEST, "echo 2 > /app/out.txt\n")
    failing = "echo 'FAILED tests/test_out.py::test_one - AssertionError'; echo 0 > /logs/verifier/reward.txt\n"
    harbor_task(tmp_path, "failing-tests", BASE, failing, "true\n")
    outside = 'if [ "$(cat /tmp/out.txt)" = 1 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    harbor_task(tmp_path, "outside-workdir", BASE, outside, "echo 1 > /tmp/out.txt\n")
    opted = '[verifier]\ngrade_in = "agent_sandbox"\n'
    harbor_task(tmp_path, "outside-workdir-opted-out", BASE, outside, "echo 1 > /tmp/out.txt\n", opted)
    harbor_task(tmp_path, "bad-reward", BASE, "echo lots > /logs/verifier/reward.txt\n", "true\n")
    harbor_task(tmp_path, "slow-solution", BASE, GOOD_TEST, "sleep 60\n", "[agent]\ntimeout_sec = 2.0\n")
    harbor_task(tmp_path, "slow-verifier", BASE, "sleep 60\n", "true\n", "[verifier]\ntimeout_sec = 2.0\n")
    harbor_task(
        tmp_path,
        "slow-build",
        BASE + f"RUN sleep 60 # {sandbox}\n",
        GOOD_TEST,
        "true\n",
        "[environment]\nbuild_timeout_sec = 3.0\n",
    )
    options = {"isolation": "bwrap"} if sandbox == "local" else {}
    checks = await check_tasks(
        load_tasks(tmp_path),
        CheckSettings(sandbox=KINDS[sandbox], concurrency=4, sandbox_options=options),
        Environments(),
    )
    reasons = {c.task: " | ".join(c.reasons) for c in checks}
    assert reasons["sound"] == "" and reasons["relative-paths"] == ""
    assert "oracle: build error" in reasons["no-build"] and "exit 3" in reasons["no-build"]
    unpulled = reasons["unpullable-base"]
    assert "'registry.example.invalid/team/base:1.0' (the Dockerfile's FROM)" in unpulled and "docker load" in unpulled
    assert reasons["checks-nothing"] == "do-nothing: reward 1, expected 0; verifier: (no output)"
    assert reasons["wrong-solution"].startswith("oracle: reward 0, expected 1")
    assert "oracle: reward 0, expected 1; verifier: failed tests/test_out.py::test_one" in reasons["failing-tests"]
    # graded like a rollout: in a fresh sandbox holding only the working directory, unless the task opts out
    assert 'grade_in = "agent_sandbox"' in reasons["outside-workdir"]
    assert reasons["outside-workdir-opted-out"] == ""
    assert "verifier error" in reasons["bad-reward"] and "lots" in reasons["bad-reward"]
    assert reasons["slow-solution"].startswith("oracle: agent timeout")
    assert "oracle: verifier timeout" in reasons["slow-verifier"]
    assert "oracle: build error" in reasons["slow-build"] and "build timed out" in reasons["slow-build"]
