"""The quickstart's held-out task sets: which there are, and which version each evaluates."""

from __future__ import annotations

from harnesses.task import Task
from harnessrl.training import quickstart_evals
from harnessrl.training.quickstart_evals import eval_line, evaluate_sets, held_out_sets
from harnessrl.training.quickstart_plan import QuickstartPlan, create_agent


def plan(tmp_path, **fields) -> QuickstartPlan:
    return QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", **fields)


def test_the_unseen_kind_is_a_set_of_its_own_run_beside_the_held_out_split(tmp_path):
    held, unseen = [Task(name="held", instruction="x")], [Task(name="unseen", instruction="y")]
    p = plan(tmp_path, eval_every=2, eval_tasks=held, unseen_tasks=unseen, eval_k=3)
    sets = held_out_sets(p, create_agent(p), "http://127.0.0.1:9", "key", None)
    assert [(label, e.run, e.settings.tasks, e.settings.k) for label, e in sets] == [
        ("held-out", "q", held, 3),
        ("unseen kind", "q-unseen", unseen, 3),
    ]
    assert held_out_sets(plan(tmp_path, eval_tasks=held), create_agent(p), "http://x", "key", None) == []


class TaskSet:
    policy = "pi"

    def __init__(self, evaluated: set[int]):
        self.gateway_url, self.evaluated, self.asked = "http://127.0.0.1:9", evaluated, []

    async def evaluate(self, version: int) -> dict:
        self.asked.append(version)
        return {"eval_version": version}


class Gateway:
    asked = 0

    def __init__(self, url: str, key: str):
        pass

    async def policies(self) -> list[dict]:
        Gateway.asked += 1
        return [{"policy": "policy", "current_version": 9}, {"policy": "pi", "current_version": 5}]

    async def close(self) -> None:
        return None


async def test_the_final_evaluation_is_of_the_version_current_once_for_every_set(monkeypatch):
    monkeypatch.setattr(quickstart_evals, "GatewayClient", Gateway)
    fresh, done = TaskSet({0}), TaskSet({0, 5})
    shown = await evaluate_sets([("held-out", fresh), ("unseen kind", done)], "key", final=True)
    assert Gateway.asked == 1  # one version for both sets, even if the learner publishes meanwhile
    assert shown == [("held-out", {"eval_version": 5})]  # the set that holds v5 already is not run again
    assert (fresh.asked, done.asked) == ([5], [])


def test_an_evaluation_prints_as_one_line():
    metrics = {"eval_version": 3, "eval_tasks": 5, "eval_k": 4, "eval_pass_at_1": 0.75}
    metrics |= {"eval_pass_at_k": 1.0, "eval_reward_mean": 0.8}
    assert eval_line("held-out", metrics) == (
        "held-out eval of v3 (5 tasks, k=4): pass@1 0.750, pass@k 1.000, mean reward 0.800"
    )
