"""When quickstart's rounds stop: the time budget, then a step count (``until_version``), never a dead learner;
the sanity bar's stop, a whole round's train pass@1 (``until_pass_at_1``), whatever those say."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from harnessrl.training.quickstart import Quickstart
from harnessrl.training.quickstart_plan import QuickstartPlan, grpo_until, reached_the_bar, round_pass_at_1
from harnessrl.training.warm_start import WarmStart
from learner.sft import SftStep
from rollouts.run_plan import Admission, RolloutResult
from store.records import GroupStatus


class Learner:
    def __init__(self, alive: bool):
        self._alive = alive

    def alive(self) -> bool:
        return self._alive


class Gateway:
    def __init__(self, version: int, ready: int = 0):
        self.version, self.ready = version, ready

    async def policies(self) -> list[dict]:
        return [{"policy": "policy", "current_version": self.version}]

    async def groups(self, run: str, status: str, limit: int) -> list[dict]:
        assert status == GroupStatus.READY
        return [{"id": n} for n in range(min(self.ready, limit))]


def quickstart(tmp_path, monkeypatch, until_version: int = 0, **fields) -> Quickstart:
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    plan = QuickstartPlan(
        run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", until_version=until_version, **fields
    )
    return Quickstart(plan)


PAST, AHEAD = time.monotonic() - 1, time.monotonic() + 10**6


@pytest.mark.parametrize(("version", "going"), [(0, True), (1, True), (2, False), (3, False)])
async def test_past_the_time_budget_rounds_go_on_until_the_version_is_published(tmp_path, monkeypatch, version, going):
    assert await quickstart(tmp_path, monkeypatch)._going(Gateway(version), PAST, Learner(True), 2) is going


async def test_within_the_time_budget_rounds_go_on_whatever_the_version(tmp_path, monkeypatch):
    assert await quickstart(tmp_path, monkeypatch)._going(Gateway(0), AHEAD, Learner(True), 1)


async def test_a_warm_start_that_spent_the_time_budget_still_gets_one_round(tmp_path, monkeypatch):
    run = quickstart(tmp_path, monkeypatch)
    assert await run._going(Gateway(1), PAST, Learner(True), 1, rounds=0)
    assert not await run._going(Gateway(1), PAST, Learner(True), 1, rounds=1)
    assert not await run._going(Gateway(1), PAST, Learner(False), 1, rounds=0)


@pytest.mark.parametrize(("until_version", "start", "until"), [(0, 0, 1), (0, 1, 2), (5, 1, 5), (2, 3, 4)])
def test_grpo_goes_on_to_the_asked_version_and_at_least_one_step_past_its_start(tmp_path, until_version, start, until):
    plan = QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", until_version=until_version)
    assert grpo_until(plan, start) == until


@pytest.mark.parametrize(("ready", "admission"), [(0, Admission.GO), (5, Admission.GO), (6, Admission.HOLD)])
async def test_a_grpo_round_holds_new_groups_back_while_the_learner_has_its_backlog_waiting(
    tmp_path, monkeypatch, ready, admission
):
    run = quickstart(tmp_path, monkeypatch, groups_per_step=3, backlog_steps=2)
    assert await run._pace(Gateway(1, ready), AHEAD, Learner(True), 2) is admission


async def test_a_grpo_round_stops_beginning_groups_past_the_time_budget_once_grpo_took_its_step(tmp_path, monkeypatch):
    run = quickstart(tmp_path, monkeypatch)
    assert await run._pace(Gateway(1), PAST, Learner(True), 2) is Admission.GO  # v2 not published yet
    assert await run._pace(Gateway(2), PAST, Learner(True), 2) is Admission.STOP
    assert await run._pace(Gateway(1), AHEAD, Learner(False), 2) is Admission.STOP  # the learner died


def test_the_final_adapter_is_the_served_one_whether_sft_or_the_learner_published_it(tmp_path, monkeypatch):
    run = quickstart(tmp_path, monkeypatch, 0)
    for folder in ("sft/adapters/policy-v1", "learner/adapters/policy-v2", "learner/adapters/policy-v3"):
        (run.home / folder).mkdir(parents=True)
    run.dashboard.policy = {"current_version": 1}  # the learner took no step: SFT's adapter serves
    assert run._final_adapter() == run.home / "sft/adapters/policy-v1"
    run.dashboard.policy = {"current_version": 2}
    assert run._final_adapter() == run.home / "learner/adapters/policy-v2"
    run.dashboard.policy = None  # the gateway never answered: the newest saved
    assert run._final_adapter() == run.home / "learner/adapters/policy-v3"


async def test_a_dead_learner_ends_the_rounds(tmp_path, monkeypatch):
    assert not await quickstart(tmp_path, monkeypatch)._going(Gateway(0), AHEAD, Learner(False), 5)


def test_each_round_visits_every_task_once_in_its_own_order_mixing_the_kinds():
    from harnesses.shell_family import shell_tasks
    from harnessrl.training.quickstart_plan import round_order

    tasks = shell_tasks()  # sorted by kind: 8 of one kind, then the next
    first, again, second = round_order(tasks, 0), round_order(tasks, 0), round_order(tasks, 1)
    assert sorted(t.name for t in first) == sorted(t.name for t in tasks)
    assert [t.name for t in first] == [t.name for t in again]  # seeded: a rerun visits the same order
    assert [t.name for t in first] != [t.name for t in second]
    kinds = {t.name.rsplit("-", 1)[0] for t in first[:8]}
    assert len(kinds) >= 3  # a learner step of the first groups sees several kinds, not one


def test_the_train_temperature_is_the_grpo_rounds_and_the_warm_up_keeps_the_agents(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    plain = QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://")
    hotter = QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", train_temperature=1.2)
    assert Quickstart(plain)._temperature("grpo") == plain.agent.temperature == 1.0
    assert Quickstart(hotter)._temperature("grpo") == 1.2
    assert Quickstart(hotter)._temperature("warm-up: teacher solutions") == 1.0


async def test_the_final_adapter_is_the_version_served_last(tmp_path, monkeypatch):
    q = quickstart(tmp_path, monkeypatch, 0)
    for version in (2, 3):
        (q.home / "learner" / "adapters" / f"policy-v{version}").mkdir(parents=True)
    q.dashboard.policy = {"current_version": 2}  # v3 was saved but never published
    assert q._final_adapter().name == "policy-v2"
    q.dashboard.policy = {}
    assert q._final_adapter().name == "policy-v3"


class TaskSet:
    """A held-out set's evaluation that finishes only once every set has started (side by side)."""

    def __init__(self, started: list[str], name: str, sets: int):
        self.started, self.name, self.sets, self.evaluated = started, name, sets, {0}

    async def evaluate(self, version: int) -> dict:
        self.started.append(self.name)
        while len(self.started) < self.sets:  # a set evaluated after the other would wait here forever
            await asyncio.sleep(0.01)
        return {"eval_version": version, "eval_tasks": 1, "eval_k": 4} | dict.fromkeys(
            ("eval_pass_at_1", "eval_pass_at_k", "eval_reward_mean"), 0.5
        )


async def test_the_held_out_sets_are_evaluated_side_by_side_and_each_is_shown(tmp_path, monkeypatch):
    started: list[str] = []
    evals = [(name, TaskSet(started, name, 2)) for name in ("held-out", "unseen kind")]
    run = quickstart(tmp_path, monkeypatch, 0)
    await asyncio.wait_for(run._evaluate(evals, version=1), timeout=600)
    assert sorted(started) == ["held-out", "unseen kind"]
    assert sorted(run.dashboard.evals[1]) == ["held-out", "unseen kind"]
    await run._evaluate(evals, version=0)  # evaluated already: not again
    assert len(started) == 2


async def test_an_interrupted_warm_start_ends_its_sft_thread_at_the_next_step(tmp_path, monkeypatch):
    import harnessrl.training.quickstart as quickstart_module

    running, ended, torn_down = threading.Event(), threading.Event(), threading.Event()

    def endless_sft(plan, on_step):  # an SFT that would run until the test ends unless its callback ends it
        try:
            while not torn_down.is_set():  # so a broken interrupt fails the test instead of hanging its exit
                on_step(SftStep(1, 0, 1.0, 10, 1.0))
                running.set()
        finally:
            ended.set()

    async def no_round(*args, **kwargs) -> None:
        return None

    monkeypatch.setattr(quickstart_module, "run_sft", endless_sft)
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    plan = QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", warm_start=WarmStart())
    run = Quickstart(plan)
    monkeypatch.setattr(run, "_one_round", no_round)
    warm = asyncio.create_task(run._warm_start(None, "http://127.0.0.1:9", time.monotonic() + 3600))
    await asyncio.to_thread(running.wait)
    warm.cancel()
    with pytest.raises(asyncio.CancelledError):
        await warm
    try:
        assert await asyncio.to_thread(ended.wait, 60)  # the thread ended: the process can exit
    finally:
        torn_down.set()


async def test_an_evaluation_beside_the_next_phase_starts_after_the_one_before_it_ends(tmp_path, monkeypatch):
    order: list[str] = []
    first_may_end = asyncio.Event()

    async def evaluation(name: str, gate: asyncio.Event | None = None) -> None:
        order.append(f"{name} starts")
        if gate is not None:
            await gate.wait()
        order.append(f"{name} ends")

    first = Quickstart._beside(None, lambda: evaluation("base", first_may_end))
    second = Quickstart._beside(first, lambda: evaluation("sft"))
    await asyncio.sleep(0)  # both tasks ran as far as they can: the base evaluation waits, the next waits for it
    assert order == ["base starts"] and not second.done()
    first_may_end.set()
    await asyncio.wait_for(second, timeout=600)
    assert order == ["base starts", "base ends", "sft starts", "sft ends"]


def test_with_a_learner_folder_the_run_is_handed_to_the_servers_learner_with_its_warm_start(tmp_path, monkeypatch):
    from harnessrl.training.learner_folder import LearnerFolder, SharedLearner
    from harnessrl.training.warm_start import WarmStartResult

    run = quickstart(tmp_path, monkeypatch, learner_folder=tmp_path / "shared")
    monkeypatch.setattr("harnessrl.training.quickstart.ManagedProcess", None)  # starting a process would fail
    warm = WarmStartResult(adapter=tmp_path / "sft-adapter", version=2, rollouts=3)

    learner = run._start_learner("http://127.0.0.1:9", warm)

    assert isinstance(learner, SharedLearner) and learner.alive()  # no learner up yet: it is waited for
    settings = LearnerFolder(tmp_path / "shared").settings("q")
    assert settings.lora.init_adapter == str(tmp_path / "sft-adapter") and settings.lora.init_version == 2
    assert settings.output_dir == str(run.home / "learner")  # the adapters _final_adapter looks for


def results(rewards: list[float | None]) -> list[RolloutResult]:
    return [RolloutResult("t", n, n, "finished" if r is not None else "failed", r) for n, r in enumerate(rewards)]


def test_a_rounds_train_pass_at_1_counts_solved_rollouts_of_all_it_was_to_play():
    assert round_pass_at_1(results([1.0, 0.0, 1.5, 0.5]), 4) == 0.5  # at least PASS_REWARD passes
    assert round_pass_at_1(results([1.0, None, 1.0, 1.0]), 4) == 0.75  # a failed rollout is no pass
    assert round_pass_at_1(results([1.0, 1.0, 1.0]), 4) is None  # cut short: no pass@1 of a whole round
    assert round_pass_at_1([], 0) is None


@pytest.mark.parametrize(("bar", "pass_at_1", "reached"), [(0.0, 1.0, False), (0.95, 0.9, False), (0.95, 0.95, True)])
def test_the_bar_is_reached_by_a_whole_round_at_or_above_it(tmp_path, bar, pass_at_1, reached):
    plan = QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", until_pass_at_1=bar)
    assert reached_the_bar(plan, pass_at_1) is reached
    assert not reached_the_bar(plan, None)


@pytest.mark.parametrize(("bar", "rounds"), [(0.95, 3), (0.0, 5)])
async def test_grpo_rounds_stop_after_the_first_whole_round_at_the_bar(tmp_path, monkeypatch, bar, rounds):
    from harnesses.families import arithmetic_tasks

    tasks = arithmetic_tasks(2)
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    plan = QuickstartPlan(
        run="q", model_dir=tmp_path, tasks=tasks, database_url="sqlite://", group_size=2, until_pass_at_1=bar,
        max_rounds=5,
    )  # fmt: skip
    run = Quickstart(plan)
    played = iter([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0] * 4, [1.0] * 4])

    async def one_round(client, round_, pace, tasks):
        return run.dashboard.next_round("grpo"), results(next(played))

    monkeypatch.setattr(run, "_one_round", one_round)
    await run._grpo(Gateway(0), AHEAD, Learner(True), None, [], asyncio.get_running_loop().create_future())
    assert list(run.train_pass_at_1.values()) == [0.25, None, 1.0, 1.0, 1.0][:rounds]  # the cut-short round: None
