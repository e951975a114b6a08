"""Learnable GRPO rounds: tasks drawn by their family's chance of a reward spread."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from harnesses.task import Task
from harnessrl.training.curriculum import (
    family,
    family_odds,
    learnable_round,
    next_round,
    spread_chance,
    systematic_counts,
)
from harnessrl.training.quickstart import Quickstart
from harnessrl.training.quickstart_plan import QuickstartPlan


def tasks_of(*families: str, instances: int = 6) -> list[Task]:
    return [Task(name=f"{fam}-{n:02d}", instruction="do it") for fam in families for n in range(1, instances + 1)]


def rollout(task: str, reward: float | None, status: str = "finished", round_: int = 0) -> dict:
    return {"task": task, "reward": reward, "status": status, "meta": {"round": round_}}


def test_a_family_is_the_name_without_its_instance_number():
    assert family("shell-folder-09") == "shell-folder"
    assert family("arith-add-three-0") == "arith-add-three"
    assert family("fix-the-parser") == "fix-the-parser"


@pytest.mark.parametrize(("p", "chance"), [(0.0, 0.0), (1.0, 0.0), (0.5, 0.875), (0.9, 1 - 0.9**4 - 0.1**4)])
def test_the_spread_chance_is_the_share_of_groups_neither_all_pass_nor_all_fail(p, chance):
    assert spread_chance(p, 4) == pytest.approx(chance)


def test_a_solved_family_weighs_least_and_an_unplayed_or_even_one_most():
    scored = [("solved-01", 1.0)] * 16 + [("half-01", 1.0), ("half-02", 0.0)] * 8
    odds = family_odds(["solved-01", "half-01", "new-01"], scored, group_size=4)
    assert odds["solved"].p == pytest.approx(17 / 18) and odds["solved"].weight == pytest.approx(0.205, abs=1e-3)
    assert odds["half"].p == 0.5 and odds["half"].weight == pytest.approx(0.875)
    assert odds["new"].p == 0.5 and odds["new"].rollouts == 0


def test_one_group_that_all_passed_does_not_mark_a_family_solved():
    odds = family_odds(["lucky-01"], [("lucky-01", 1.0)] * 4, group_size=4)["lucky"]
    assert odds.p == pytest.approx(5 / 6) and odds.weight > 0.5


def test_a_familys_odds_follow_its_last_four_groups_not_its_whole_history():
    scored = [("moved-01", 0.0)] * 32 + [("moved-01", 1.0)] * 16  # failed for long, now solved
    assert family_odds(["moved-01"], scored, group_size=4)["moved"].p == pytest.approx(17 / 18)


def test_a_learnable_round_draws_mostly_from_the_family_with_a_spread():
    tasks = tasks_of("solved", "half", instances=40)
    odds = family_odds([t.name for t in tasks], [("solved-01", 1.0)] * 16 + [("half-01", 0.5)] * 16, 4)
    drawn = Counter(family(t.name) for t in learnable_round(tasks, odds, Counter(), 30, random.Random(0)))
    assert drawn["half"] >= 20 and sum(drawn.values()) == 30  # 0.875 against 0.205: 24 of 30 expected


@pytest.mark.parametrize("seed", range(20))
def test_each_family_gets_the_floor_or_the_ceiling_of_its_expected_draws(seed):
    weights = {"even": 0.875, "solved": 0.205, **{f"mid{n}": 0.52 for n in range(6)}}
    counts = systematic_counts(weights, 8, random.Random(seed))
    assert counts.total() == 8
    for key, weight in weights.items():
        expected = 8 * weight / sum(weights.values())
        assert int(expected) <= counts[key] <= int(expected) + 1, (key, counts)


@pytest.mark.parametrize("seed", range(20))
def test_a_round_never_starves_the_most_learnable_family(seed):
    tasks = tasks_of("unplayed", *(f"mostly{n}" for n in range(7)), instances=8)
    scored = [(f"mostly{n}-01", r) for n in range(7) for r in (1.0, 1.0, 1.0, 0.0)]
    odds = family_odds([t.name for t in tasks], scored, 4)
    drawn = learnable_round(tasks, odds, Counter(), 8, random.Random(seed))
    assert "unplayed" in {family(t.name) for t in drawn}


def test_a_family_short_of_instances_gives_its_share_back():
    tasks = tasks_of("few", instances=1) + tasks_of("many", instances=10)
    odds = family_odds([t.name for t in tasks], [("many-01", 1.0)] * 16, 4)  # "few" weighs 4x "many"
    drawn = Counter(family(t.name) for t in learnable_round(tasks, odds, Counter(), 6, random.Random(0)))
    assert drawn == {"few": 1, "many": 5}


def test_a_round_takes_each_task_once_least_played_first_and_all_when_asked_for_more():
    tasks = tasks_of("only", instances=3)
    odds = family_odds([t.name for t in tasks], [], 4)
    played = Counter({"only-01": 2, "only-02": 1})
    assert [t.name for t in learnable_round(tasks, odds, played, 2, random.Random(0))] == ["only-03", "only-02"]
    assert sorted(t.name for t in learnable_round(tasks, odds, played, 10, random.Random(0))) == [
        "only-01",
        "only-02",
        "only-03",
    ]


def test_the_next_round_scores_failed_rollouts_as_zero_and_skips_cancelled_ones():
    tasks = tasks_of("fails", "cancelled", instances=2)
    rollouts = [rollout("fails-01", None, "failed")] * 4 + [rollout("cancelled-01", None, "cancelled")] * 4
    _, odds = next_round(tasks, rollouts, group_size=4, size=2, round_=0)
    assert odds["fails"].p == pytest.approx(1 / 6) and odds["fails"].rollouts == 4
    assert odds["cancelled"].p == 0.5 and odds["cancelled"].rollouts == 0  # nothing scored yet


def test_the_next_round_counts_a_task_played_once_per_round():
    tasks = tasks_of("fam", instances=2)
    rollouts = [rollout("fam-01", 1.0, round_=r) for r in (0, 1) for _ in range(4)]
    chosen, _ = next_round(tasks, rollouts, group_size=4, size=1, round_=3)
    assert [t.name for t in chosen] == ["fam-02"]  # fam-01 played in two rounds, fam-02 in none


class Rollouts:
    def __init__(self, rollouts: list[dict]):
        self.listed = rollouts

    async def rollouts(self, run: str) -> list[dict]:
        return self.listed


async def test_a_learnable_quickstart_round_is_the_backlogs_size_and_logged(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    tasks = tasks_of("solved", "half", instances=20)
    plan = QuickstartPlan(run="q", model_dir=tmp_path, tasks=tasks, database_url="sqlite://", task_sampling="learnable")
    run = Quickstart(plan)
    run.home.mkdir(parents=True)
    scored = [rollout("solved-01", 1.0)] * 16 + [rollout("half-01", r) for r in (0.0, 1.0)] * 8
    chosen = await run._grpo_tasks(Rollouts(scored), round_=1)
    assert len(chosen) == plan.groups_per_step * plan.backlog_steps == 8
    line = json.loads((run.home / "curriculum.jsonl").read_text())
    assert line["round"] == 1 and line["tasks"] == [t.name for t in chosen]
    weights = {f["family"]: f["weight"] for f in line["families"]}
    assert weights == {"solved": pytest.approx(0.205, abs=1e-3), "half": pytest.approx(0.875)}


async def test_a_pass_quickstart_round_plays_every_task(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    tasks = tasks_of("a", "b", instances=3)
    run = Quickstart(QuickstartPlan(run="q", model_dir=tmp_path, tasks=tasks, database_url="sqlite://"))
    assert sorted(t.name for t in await run._grpo_tasks(Rollouts([]), round_=0)) == sorted(t.name for t in tasks)
