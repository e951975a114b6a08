"""builtin:shell: every task is sound (its solution passes, doing nothing or the wrong thing fails), the
instances differ, and the unseen kind is apart from the trained ones."""

from __future__ import annotations

from collections import Counter

import pytest

from harnesses.datasets import Selection, load_dataset, select
from harnesses.grading.verify import verify
from harnesses.shell_family import KINDS, TEST_PER_KIND, TRAIN_PER_KIND, WORDS, shell_tasks, unseen_shell_tasks
from sandboxes import SandboxSpec, create_sandbox

TASKS = [*shell_tasks(train=2, test=1, seed=7), *unseen_shell_tasks(2, seed=7)]


async def _graded(task, command: str | None) -> float:
    async with await create_sandbox("local", SandboxSpec(files=dict(task.files)), isolation="bwrap") as sandbox:
        if command:
            result = await sandbox.exec(["sh", "-c", command], timeout_s=60)
            assert result.exit_code == 0, result.text()
        return (await verify(sandbox, task)).reward


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
async def test_a_shell_tasks_solution_passes_and_doing_nothing_fails(task):
    assert await _graded(task, task.solution) == 1.0
    assert await _graded(task, None) == 0.0


@pytest.mark.parametrize("kind", ["write", "count", "replace", "append"])
async def test_a_near_miss_fails(kind):
    task = next(t for t in TASKS if t.name.startswith(f"shell-{kind}-"))
    wrong = {
        "write": task.solution.replace("echo ", "echo x"),
        "count": task.solution.replace("grep -c", "grep -vc"),
        "replace": task.solution.replace("/g'", "/'").replace("s/", "s/^"),
        "append": task.solution.replace(">>", ">"),
    }[kind]
    assert await _graded(task, wrong) == 0.0


def test_instances_are_distinct_and_the_family_is_deterministic():
    tasks = shell_tasks()
    assert len({t.instruction for t in tasks}) == len(tasks) == (TRAIN_PER_KIND + TEST_PER_KIND) * len(KINDS)
    assert [t.instruction for t in shell_tasks()] == [t.instruction for t in tasks]


def test_both_splits_hold_every_kind_and_the_unseen_kind_is_never_trained_on():
    tasks = load_dataset("builtin:shell")
    for split, per_kind in (("train", TRAIN_PER_KIND), ("test", TEST_PER_KIND)):
        kinds = Counter(t.name.split("-")[1] for t in select(tasks, Selection(split=split)))
        assert kinds == dict.fromkeys(KINDS, per_kind), split
    unseen = load_dataset("builtin:shell-unseen")
    assert unseen and not {t.name.split("-")[1] for t in unseen} & set(KINDS)
    assert not {t.instruction for t in unseen} & {t.instruction for t in tasks}


def test_no_word_hides_inside_another_so_substring_tools_count_right():
    """grep -c and sed match substrings: a word inside another (pear, pearl) would make them miscount."""
    assert not [(a, b) for a in WORDS for b in WORDS if a != b and a in b]
