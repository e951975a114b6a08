"""Which tasks a GRPO round plays: the learnable ones (dynamic sampling by task family).

GRPO learns only from a group whose rewards spread: a group whose G rollouts all pass (or all fail)
has zero advantage everywhere and costs its rollouts for nothing. After a warm start most families
of a task set are solved (`make demo`'s first GRPO round: 10 of 44 groups had a spread), so a round
that plays every task once spends most of its time on them. A learnable round instead draws tasks by
their family's chance of a spread: with ``p`` the family's mean reward over its last rollouts, a group
of G spreads with probability ``1 - p**G - (1 - p)**G`` (DAPO's dynamic sampling, done before the
rollouts rather than by discarding groups after them). ``p`` counts one pass and one fail beside the
rollouts (a Beta(1, 1) prior): an unplayed family is at 0.5, the most learnable, so every family is
tried early, and one group of 4 passes moves it to 0.83, not 1.0 (a family passing 70% of the time
has a 1 in 4 chance of such a group; taken as solved, it would seldom be drawn again to be corrected).
The prior also keeps every weight above 0: a family solved over its last four groups (p = 0.94, weight
0.21 for G = 4 against 0.875 at p = 0.5) is still drawn now and then, in case it regresses. Within a
family the least-played instance goes first, so a family's instances take turns.

A family is a task's name without its trailing instance number (``shell-folder-09`` -> ``shell-folder``);
a task set without numbered instances makes each task its own family.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from harnesses.task import Task
from store.records import SCORED

TaskSampling = Literal["pass", "learnable"]  # every task once a round, or learnable rounds
INSTANCE = re.compile(r"-\d+$")
WINDOW_GROUPS = 4  # a family's p is read from its last this-many groups' worth of rollouts


def family(task_name: str) -> str:
    """``shell-folder-09`` -> ``shell-folder``; a name without a trailing number is its own family."""
    return INSTANCE.sub("", task_name)


def spread_chance(p: float, group_size: int) -> float:
    """The chance that a group of ``group_size`` rollouts, each passing with probability ``p``, has a
    reward spread (not all pass, not all fail): the share of such groups that teach GRPO anything."""
    return 1.0 - p**group_size - (1.0 - p) ** group_size


@dataclass(frozen=True)
class FamilyOdds:
    family: str
    p: float  # the mean reward of its last rollouts, with one pass and one fail added (0.5 unplayed)
    rollouts: int  # scored rollouts p is read from
    weight: float  # its draw weight: the chance that a group of it spreads


def family_odds(names: Iterable[str], scored: Iterable[tuple[str, float]], group_size: int) -> dict[str, FamilyOdds]:
    """Each family of ``names`` with its odds, from ``scored`` (task name, reward in [0, 1]) in the order
    the rollouts began: a family's p is read from its last ``WINDOW_GROUPS * group_size`` rewards."""
    rewards: dict[str, list[float]] = defaultdict(list)
    for name, reward in scored:
        rewards[family(name)].append(min(max(reward, 0.0), 1.0))
    odds = {}
    for fam in dict.fromkeys(family(name) for name in names):
        recent = rewards[fam][-WINDOW_GROUPS * group_size :]
        p = (sum(recent) + 1.0) / (len(recent) + 2.0)
        odds[fam] = FamilyOdds(fam, p, len(recent), spread_chance(p, group_size))
    return odds


def systematic_counts(weights: Mapping[str, float], n: int, rng: random.Random) -> Counter:
    """``n`` draws among ``weights``' keys by stochastic universal sampling: one random offset, then ``n``
    evenly spaced pointers over the cumulative weights, so each key gets the floor or the ceiling of its
    expected ``n * w / sum(w)`` draws. (Independent draws let chance starve a family: in one demo run an
    unplayed family, the most learnable, was drawn once in 32.)"""
    total, counts, cumulative = sum(weights.values()), Counter(), 0.0
    step = total / n
    pointer = rng.uniform(0.0, step)
    for key, weight in weights.items():
        cumulative += weight
        while pointer < cumulative and counts.total() < n:
            counts[key] += 1
            pointer += step
    if counts.total() < n:  # the last pointer past a rounded-down total
        counts[key] += n - counts.total()
    return counts


def learnable_round(
    tasks: list[Task], odds: Mapping[str, FamilyOdds], plays: Counter, size: int, rng: random.Random
) -> list[Task]:
    """``size`` distinct tasks (all of them if fewer), shared among the families by their weights
    (``systematic_counts``), each family's least-played instances first (``plays``: task name -> groups
    played; ties in ``tasks``' order). A family with fewer instances left than its share gives the rest
    back to the others."""
    left: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        left[family(task.name)].append(task)
    for instances in left.values():
        instances.sort(key=lambda task: plays[task.name])  # stable: ties keep the given order
    chosen: list[Task] = []
    while len(chosen) < size and left:
        counts = systematic_counts({fam: odds[fam].weight for fam in left}, size - len(chosen), rng)
        for fam, n in counts.items():
            chosen += left[fam][:n]
            del left[fam][:n]
            if not left[fam]:
                del left[fam]
    return chosen


def next_round(
    tasks: list[Task], rollouts: list[dict], group_size: int, size: int, round_: int, log: Path | None = None
) -> tuple[list[Task], dict[str, FamilyOdds]]:
    """The next learnable round of ``size`` tasks from the run's rollouts so far (the REST listing's
    dicts: task, status, reward, meta.round), and the odds it was drawn by, both appended to ``log``;
    ``round_`` seeds the draw."""
    scored = [(r["task"], r["reward"] or 0.0) for r in rollouts if r["status"] in SCORED]
    played = {(r["task"], r["meta"].get("round", 0)) for r in rollouts}
    odds = family_odds((task.name for task in tasks), scored, group_size)
    rng = random.Random(round_)
    shuffled = rng.sample(tasks, len(tasks))  # ties among instances in an order of the round's own
    chosen = learnable_round(shuffled, odds, Counter(name for name, _ in played), size, rng)
    if log is not None:
        log_round(log, round_, chosen, odds)
    return chosen, odds


def log_round(path: Path, round_: int, tasks: list[Task], odds: Mapping[str, FamilyOdds]) -> None:
    """Appends a learnable round's draw to ``path`` (JSON lines): its tasks and every family's odds."""
    line = {"round": round_, "tasks": [task.name for task in tasks], "families": [asdict(o) for o in odds.values()]}
    with open(path, "a") as log:
        log.write(json.dumps(line) + "\n")
