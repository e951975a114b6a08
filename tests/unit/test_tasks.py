"""The built-in task set: both forms load, every reference solution scores 1, doing nothing scores 0."""

from __future__ import annotations

import json
import shutil

import pytest

from harnesses.task import TaskError, builtin_tasks_path, load_tasks
from harnesses.verify import verify
from sandboxes import SandboxSpec, create_sandbox

TASKS = load_tasks(builtin_tasks_path())
ISOLATION = "bwrap" if shutil.which("bwrap") else "subprocess"


def test_the_builtin_set_has_at_least_30_tasks_in_both_forms():
    assert len(TASKS) >= 30
    assert len({t.name for t in TASKS}) == len(TASKS)
    harbor = [t for t in TASKS if t.dockerfile is not None]
    assert len(harbor) >= 5 and all(t.tests.get("test.sh") for t in harbor)
    assert all(t.solution for t in TASKS)


async def score(task, with_solution: bool) -> float | None:
    async with await create_sandbox("local", SandboxSpec(files=task.files), isolation=ISOLATION) as sandbox:
        if with_solution:
            result = await sandbox.exec(task.solution, timeout_s=60)
            assert result.exit_code == 0, result.text()
        return (await verify(sandbox, task)).reward


@pytest.mark.skipif(ISOLATION != "bwrap", reason="Harbor verifiers write /logs: needs an isolated sandbox (apt-get install bubblewrap)")
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
async def test_reference_solution_scores_one_and_doing_nothing_scores_zero(task):
    assert await score(task, with_solution=True) == 1.0
    assert await score(task, with_solution=False) == 0.0


def test_malformed_jsonl_names_the_line_and_the_fields(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"name": "ok", "instruction": "x", "verifier": "true"}) + "\n{\"name\": \"bad\"}\n")
    with pytest.raises(TaskError, match=r"tasks.jsonl:2: .*needs name, instruction, verifier"):
        load_tasks(path)


def test_missing_task_path_names_the_option(tmp_path):
    with pytest.raises(TaskError, match="--tasks"):
        load_tasks(tmp_path / "nope")
