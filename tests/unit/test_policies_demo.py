"""`demo-policies`' summary: each policy's held-out pass@1 before and after, and the share of its calls
its own adapter served, read from what the gateway recorded."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from harnessrl.training import policies_demo
from harnessrl.training.policies_demo import DemoPlan, _outcome, quickstart_process, recipe, wait_any
from tests.policy_calls import policy_rollout, publish_policy, served_call


def plan_of(database_url: str, tmp_path: Path) -> DemoPlan:
    return DemoPlan(("pi", "builtin"), 5.0, tmp_path, database_url, "k", tmp_path / "home")


async def test_the_summary_counts_held_out_passes_and_calls_served_by_the_policys_own_adapter(
    gateway, sqlite_db, tmp_path
):
    plan = plan_of(sqlite_db, tmp_path)
    await publish_policy(gateway, "pi", 1)
    trained = await policy_rollout(gateway, plan.run_of("pi"), "pi")
    for _ in range(3):
        await served_call(gateway, trained)
    for pin, reward in (("base", 0.0), ("base", 0.0), ("pi@v1", 1.0), ("pi@v1", 0.0)):
        pinned = await policy_rollout(gateway, f"{plan.run_of('pi')}-eval", "pi", pin=pin, group=pin, task="t")
        ended = {"status": "finished", "rewards": {"verifier": reward}}
        assert (await gateway.http.post(f"/api/rollouts/{pinned['id']}/end", json=ended)).status_code == 200
    outcome = await _outcome(gateway.state.store, plan, "pi")
    assert (outcome.base_pass_at_1, outcome.final_version, outcome.final_pass_at_1) == (0.0, 1, 0.5)
    assert (outcome.calls, outcome.own_adapter) == (3, 3)
    nothing = await _outcome(gateway.state.store, plan, "builtin")
    assert (nothing.base_pass_at_1, nothing.final_version, nothing.calls) == (None, 0, 0)


def test_each_agent_runs_its_recipe_through_the_shared_gateway_as_its_own_policy(tmp_path):
    plan = plan_of("sqlite:///x.db", tmp_path)
    command = quickstart_process(plan, "pi", "http://127.0.0.1:9").command
    at = command.index
    assert command[at("--gateway") + 1] == "http://127.0.0.1:9" and command[at("--policy") + 1] == "pi"
    assert command[at("--run") + 1] == "demo-policies-pi" and "--eval-every" in command
    assert command[at("--config") + 1].endswith("harnessrl/recipes/demo.toml")
    assert command[at("--learner-folder") + 1] == str(plan.learner_folder)  # handed to the one learner
    assert recipe("builtin")[1].endswith("harnessrl/recipes/arithmetic.toml")


class Ended:
    def __init__(self, alive: bool):
        self._alive = alive

    def alive(self) -> bool:
        return self._alive


def test_the_progress_wait_lasts_its_interval_once_one_quickstart_has_ended():
    slept, ticks = [], iter(range(1000))
    wait_any([Ended(False), Ended(True)], 5.0, sleep=slept.append, clock=lambda: next(ticks))
    assert len(slept) >= 4  # it waited the interval (it returned at once and printed a line every few ms)


class Process:
    """A process the demo would start: its command recorded, ended at once."""

    started: list[list[str]] = []

    def __init__(self, command, url, log_path, env=None):
        self.command, self.url, self.log_path, self.pid = command, url, log_path, None

    def start(self):
        Process.started.append(self.command)
        return self

    def alive(self) -> bool:
        return False

    def wait_healthy(self) -> None: ...

    def stop(self, timeout_s: float = 20.0) -> None: ...

    def tail(self, lines: int = 30) -> str:
        return ""

    def why(self) -> str:
        return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None: ...


@pytest.mark.parametrize("agents", [("pi", "builtin"), ("pi", "builtin", "opencode")])
def test_one_learner_process_trains_every_policys_run(tmp_path, monkeypatch, agents):
    plan = DemoPlan(agents, 5.0, tmp_path, "sqlite:///x.db", "k", tmp_path / "home")
    Process.started = []
    monkeypatch.setattr(policies_demo, "ManagedProcess", Process)
    monkeypatch.setattr(policies_demo, "engine_rss_gib", lambda serve: 0.0)
    monkeypatch.setattr(policies_demo, "_outcomes", lambda plan: [])

    policies_demo.run_demo(plan, Console(file=io.StringIO()))

    learners = [c for c in Process.started if "train" in c]
    quickstarts = [c for c in Process.started if "quickstart" in c]
    assert len(learners) == 1 and len(quickstarts) == len(agents)
    (learner,) = learners
    runs = [learner[k + 1] for k, option in enumerate(learner) if option == "--run"]
    assert runs == [plan.run_of(agent) for agent in agents]
    folder = learner[learner.index("--settings-dir") + 1]
    assert all(c[c.index("--learner-folder") + 1] == folder for c in quickstarts)
    assert all(c[c.index("--run") + 1] in runs for c in quickstarts)
