"""Generated task families are deterministic and verifiable."""

from __future__ import annotations

import shutil

import pytest

from harnesses.families import arithmetic_tasks, two_digit_tasks
from harnesses.grading.verify import verify
from sandboxes import SandboxSpec, create_sandbox


def test_arithmetic_family_is_deterministic_per_seed():
    assert [t.instruction for t in arithmetic_tasks(8, seed=1)] == [t.instruction for t in arithmetic_tasks(8, seed=1)]
    assert [t.name for t in arithmetic_tasks(8, seed=1)] != [t.name for t in arithmetic_tasks(8, seed=2)]


@pytest.mark.skipif(not shutil.which("bwrap"), reason="the verifier reads /logs: apt-get install bubblewrap")
@pytest.mark.parametrize("answer, expected", [("right", 1.0), ("wrong", 0.0), ("verbose", 0.0)])
async def test_arithmetic_answers_are_graded_on_the_final_reply(answer, expected):
    task = arithmetic_tasks(1, seed=3)[0]
    right = task.verifier.split()[-1]
    text = {
        "right": f"The answer is {right}.",
        "wrong": str(int(right) + 1),
        "verbose": " ".join(str(n) for n in range(20)),
    }[answer]
    async with await create_sandbox("local", SandboxSpec(), isolation="bwrap") as sandbox:
        await sandbox.put_file("/logs/agent/final.txt", text.encode())
        assert (await verify(sandbox, task)).reward == expected


def test_the_two_digit_family_asks_distinct_carry_free_sums_of_two_digit_numbers():
    tasks = two_digit_tasks(20, seed=0)
    pairs = [tuple(map(int, t.instruction.removeprefix("What is ").split("?")[0].split(" + "))) for t in tasks]
    assert len(set(pairs)) == 20 and [t.instruction for t in two_digit_tasks(20, seed=0)] == [
        t.instruction for t in tasks
    ]
    for (a, b), task in zip(pairs, tasks):
        assert 10 <= a <= 99 and 10 <= b <= 99 and a % 10 + b % 10 <= 9 and a + b <= 99
        assert task.verifier.split()[-1] == str(a + b)


async def test_a_two_digit_tasks_solution_passes_its_verifier():
    task = two_digit_tasks(1, seed=5)[0]
    async with await create_sandbox("local", SandboxSpec(), isolation="bwrap") as sandbox:
        await sandbox.put_file("/logs/agent/final.txt", task.verifier.split()[-1].encode())
        assert (await verify(sandbox, task)).reward == 1.0
        await sandbox.put_file("/logs/agent/final.txt", b"I think it is 12 or 13")
        assert (await verify(sandbox, task)).reward == 0.0
