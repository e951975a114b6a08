"""One learner for several policies on the tiny model: each policy's adapter is what it would be alone,
only adapters that stepped are published, turns are fair, one policy's failure stops it alone, and a
policy that appears while the learner runs joins it."""

from __future__ import annotations

import asyncio

import pytest
import torch

import learner.loop
from learner.policies_loop import Hooks
from store.store import Store
from tests.learner_policies import (
    FLAT,
    SIGNAL,
    RecordingPublisher,
    add_run_group,
    checkpoint_adapter,
    configs_for,
    end_rollouts,
    fill_run,
    train_policies,
)
from tests.learner_reads import stored_checkpoints, stored_steps
from tests.learner_runs import train_run
from tests.waiting import until


@pytest.fixture
def store(file_store: Store) -> Store:
    return file_store


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5)


async def test_a_policy_trained_beside_another_gets_the_adapter_it_gets_alone(
    store, second_store, tiny_model_dir, tmp_path
):
    await fill_run(second_store, "ada", 6, seed=0)
    alone = configs_for(tiny_model_dir, tmp_path / "alone", max_steps=3)("ada")
    await train_run(alone, second_store, "ada")
    await fill_run(store, "bob", 6, seed=100)  # another policy's data, ready first
    await fill_run(store, "ada", 6, seed=0)
    configs = configs_for(tiny_model_dir, tmp_path / "shared", max_steps=3)

    results = await train_policies(configs, store, ["bob", "ada"])  # ada's adapter is the second one

    assert {run: r.step for run, r in results.items()} == {"bob": 3, "ada": 3}
    assert_close(checkpoint_adapter(configs("ada"), 3), checkpoint_adapter(alone, 3))
    # bob's steps moved its own adapter only: it differs from ada's
    assert not torch.equal(*(next(iter(checkpoint_adapter(configs(r), 3).values())) for r in ("ada", "bob")))


async def test_only_adapters_that_stepped_are_published(store, tiny_model_dir, tmp_path):
    await fill_run(store, "ada", 4, seed=0)
    await fill_run(store, "flat", 4, seed=50, rewards=FLAT)  # no reward spread: no optimizer step
    publishers = {run: RecordingPublisher(tmp_path / "served" / run) for run in ("ada", "flat")}
    configs = configs_for(tiny_model_dir, tmp_path / "out", max_steps=2, publish_enabled=True)

    results = await train_policies(configs, store, ["ada", "flat"], publisher_for=lambda run, _: publishers[run])

    assert results["ada"].step == results["flat"].step == 2
    assert publishers["ada"].published == [1, 2] and publishers["ada"].policy == "ada"
    assert publishers["flat"].published == []
    # what was published is ada's adapter of that step, not the other policy's
    assert_close(publishers["ada"].adapter(2), checkpoint_adapter(configs("ada"), 2))


async def test_a_policy_whose_group_becomes_ready_steps_within_one_step(store, tiny_model_dir, tmp_path):
    await fill_run(store, "busy", 10, seed=0)
    late = await add_run_group(store, "late", SIGNAL, seed=99, end=False)  # its run exists, nothing ready
    configs = configs_for(
        tiny_model_dir,
        tmp_path / "out",
        groups_per_step=1,
        per_run={"busy": {"max_steps": 10}, "late": {"max_steps": 1}},
    )
    order: list[str] = []
    ready_after: list[int] = []  # how many steps were taken when late's group became ready

    async def make_late_ready() -> None:
        await until(lambda: len(order) >= 2, "busy's first steps")
        ready_after.append(len(order))
        await end_rollouts(store, late, SIGNAL)

    maker = asyncio.create_task(make_late_ready())
    results = await train_policies(
        configs, store, ["busy", "late"], hooks=Hooks(on_step=lambda run, _: order.append(run))
    )
    await maker

    assert results["late"].step == 1 and results["busy"].step == 10
    # at most the one step under way when it became ready comes between
    assert order.index("late") - ready_after[0] <= 1, order


async def test_one_policys_poisoned_sample_stops_it_alone_with_its_reason(store, tiny_model_dir, tmp_path, monkeypatch):
    poisoned = set(await fill_run(store, "bad", 4, seed=0))
    await fill_run(store, "good", 6, seed=50)
    real = learner.loop.train_batch

    def train_batch(trainer, batch, *args, **kwargs):
        if poisoned & set(batch.group_ids):
            raise ValueError(f"sample of group {min(poisoned)}: a poisoned sample")
        return real(trainer, batch, *args, **kwargs)

    monkeypatch.setattr(learner.loop, "train_batch", train_batch)
    configs = configs_for(tiny_model_dir, tmp_path / "out", max_steps=3)

    results = await train_policies(configs, store, ["bad", "good"])

    assert results["bad"].reason == "failed" and "a poisoned sample" in results["bad"].error
    assert results["bad"].step == 0 and await stored_steps(store, "bad") == []
    assert results["good"].reason == "max_steps" and len(await stored_steps(store, "good")) == 3


async def test_a_policy_added_while_the_learner_runs_joins_it(store, tiny_model_dir, tmp_path):
    await fill_run(store, "first", 2, seed=0)
    runs = ["first"]

    async def source() -> list[str]:
        return list(runs)

    stop = asyncio.Event()
    configs = configs_for(tiny_model_dir, tmp_path / "out", groups_per_step=1)
    learning = asyncio.create_task(train_policies(configs, store, source, stop=stop))
    await until(lambda: _stepped(store, "first"), "the first policy's steps")
    runs.append("second")  # e.g. a new `harnessrl run --policy second`
    await fill_run(store, "second", 2, seed=50)
    await until(lambda: _stepped(store, "second"), "the added policy's steps")
    stop.set()
    results = await learning

    assert results["second"].step >= 1 and results["second"].reason == "stopped"
    assert results["first"].step == 2


async def _stepped(store: Store, run: str) -> bool:
    return len(await stored_steps(store, run)) >= 1


class Killed(BaseException):
    """Stands in for `kill -9`: nothing of the learner's own handles it."""


async def test_a_learner_killed_mid_step_resumes_each_policy_at_its_own_checkpoint(
    store, second_store, tiny_model_dir, tmp_path, monkeypatch
):
    runs = ["a", "b", "c"]
    for k, run in enumerate(runs):
        await fill_run(store, run, 4, seed=10 * k)
        await fill_run(second_store, run, 4, seed=10 * k)
    straight = configs_for(tiny_model_dir, tmp_path / "straight", max_steps=2)
    await train_policies(straight, second_store, runs)  # the same data, never killed
    real, calls = learner.loop.train_batch, {"n": 0}

    def killed_in_the_fourth_step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:  # a, b and c took their first step; a's second dies
            raise Killed()
        return real(*args, **kwargs)

    monkeypatch.setattr(learner.loop, "train_batch", killed_in_the_fourth_step)
    configs = configs_for(tiny_model_dir, tmp_path / "out", max_steps=2)
    with pytest.raises(Killed):
        await train_policies(configs, store, runs)
    assert [len(await stored_checkpoints(store, run)) for run in runs] == [1, 1, 1]
    monkeypatch.setattr(learner.loop, "train_batch", real)

    results = await train_policies(configs, store, runs)

    assert {run: r.step for run, r in results.items()} == {"a": 2, "b": 2, "c": 2}
    for run in runs:
        consumed = [g for record in await stored_checkpoints(store, run) for g in record.group_ids]
        assert len(consumed) == len(set(consumed)) == 4  # nothing trained twice, nothing lost
        assert_close(checkpoint_adapter(configs(run), 2), checkpoint_adapter(straight(run), 2))
