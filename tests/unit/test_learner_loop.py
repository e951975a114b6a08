"""The learner's loop on a tiny random model: groups consumed in order and exactly once (also across
crashes), stale and zero-std data dropped and counted, metrics stored, adapters published."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

import learner.loop
import learner.served_settings
import learner.trainer
from learner.groups import ReadyGroup, RolloutData, build_batch
from store.listings import GroupFilter
from store.rollout_asks import AskedSettings
from store.samples import Sample
from store.store import Store
from tests.builders import call_record
from tests.learner_groups import (
    LOGPROB,
    RUN,
    Crash,
    FlakyPublisher,
    add_group,
    add_groups,
    assert_same_weights,
    config_for,
    fill,
    final_adapter,
    group_of,
    history,
    statuses,
    train,
)
from tests.learner_reads import stored_steps
from tests.waiting import until

# --- building stores ---------------------------------------------------------------------------


@pytest.fixture
def store(file_store: Store) -> Store:
    return file_store


# --- order and exactly once --------------------------------------------------------------------


async def test_ready_groups_are_consumed_in_ready_order_exactly_once(store, tiny_model_dir, tmp_path):
    # Groups 0..3 are created first, but group 1 finishes before group 0: ready order is 1, 0, 2, 3.
    first = await add_group(store, "task-a", [0.0, 1.0, 0.0, 1.0], end=False, seed=1)
    second = await add_group(store, "task-b", [1.0, 0.0, 0.5, 0.0], seed=2)
    for rollout_id, reward in zip(first, [0.0, 1.0, 0.0, 1.0]):
        await store.end_rollout(rollout_id, "finished", rewards={"verifier": reward})
    later = await fill(store, 2)
    still_open = await add_group(store, "task-open", [1.0, 0.0, 1.0, 0.0], end=False, seed=9)
    order = [await group_of(store, second[0]), await group_of(store, first[0]), *later]

    result = await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=2), store)

    assert result.step == 2 and result.reason == "max_steps"
    assert await history(store) == [tuple(order[:2]), tuple(order[2:])]
    status = await statuses(store)
    assert all(status[g] == "consumed" for g in order)
    assert status[await group_of(store, still_open[0])] == "open"  # not ready: never read


async def test_the_learner_waits_for_enough_ready_groups_and_stops_when_asked(store, tiny_model_dir, tmp_path):
    await fill(store, 3)  # one step's worth and a half
    stop = asyncio.Event()
    config = config_for(tiny_model_dir, tmp_path / "out", checkpoint_every=10)
    task = asyncio.create_task(train(config, store, stop=stop))

    async def stepped() -> bool:  # or stopped: the assertion below then says so at once
        return task.done() or bool(await stored_steps(store, RUN))

    await until(stepped, "the first step", timeout_s=300, interval_s=0.05)
    await asyncio.sleep(0.2)  # polling meanwhile: the third group alone is not a batch (slow: a false pass)
    assert not task.done()
    stop.set()
    result = await task
    assert result.reason == "stopped" and result.step == 1
    # checkpoint_every = 10, but a graceful stop checkpoints what it trained
    assert [len(ids) for ids in await history(store)] == [2]
    assert list((await statuses(store)).values()).count("ready") == 1


async def test_a_crash_between_steps_resumes_without_training_a_group_twice(
    store, second_store, tiny_model_dir, tmp_path, monkeypatch
):
    groups = await fill(store, 8)
    await fill(second_store, 8)  # the same data, trained straight through
    reference = config_for(tiny_model_dir, tmp_path / "ref", max_steps=4, checkpoint_every=2)
    await train(reference, second_store)

    # checkpoint_every = 2: the crash in step 4 also loses step 3, whose groups must be trained again.
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=4, checkpoint_every=2)
    real_train_batch = learner.loop.train_batch
    calls = {"n": 0}

    def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise Crash("killed during step 4")
        return real_train_batch(*args, **kwargs)

    monkeypatch.setattr(learner.loop, "train_batch", crashing)
    with pytest.raises(Crash):
        await train(config, store)
    assert await history(store) == [tuple(groups[:4])]
    monkeypatch.setattr(learner.loop, "train_batch", real_train_batch)

    result = await train(config, store)

    assert result.step == 4
    assert await history(store) == [tuple(groups[:4]), tuple(groups[4:])]
    assert set((await statuses(store)).values()) == {"consumed"}
    assert_same_weights(final_adapter(config, 4), final_adapter(reference, 4))


async def test_a_crash_after_the_checkpoint_write_before_the_commit_reloads_the_committed_one(
    store, second_store, tiny_model_dir, tmp_path, monkeypatch
):
    groups = await fill(store, 6)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3)
    real_commit = store.training.commit_checkpoint
    calls = {"n": 0}

    async def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Crash("killed after writing step 2, before committing it")
        return await real_commit(*args, **kwargs)

    monkeypatch.setattr(store.training, "commit_checkpoint", crashing)
    with pytest.raises(Crash):
        await train(config, store)
    orphan = Path(config.checkpoint.dir) / "step-00000002"
    assert (orphan / "trainer.pt").exists()  # complete on disk, but the store never recorded it
    assert await history(store) == [tuple(groups[:2])]
    assert (await statuses(store))[groups[2]] == "ready"
    monkeypatch.setattr(store.training, "commit_checkpoint", real_commit)

    result = await train(config, store)

    assert result.step == 3
    assert await history(store) == [tuple(groups[:2]), tuple(groups[2:4]), tuple(groups[4:])]
    assert set((await statuses(store)).values()) == {"consumed"}
    # The resumed run reloaded step 1, retrained groups 2-3 and wrote step 2 again: the same weights as
    # training the same data straight through.
    await fill(second_store, 6)
    straight = config_for(tiny_model_dir, tmp_path / "straight", max_steps=3)
    await train(straight, second_store)
    assert_same_weights(final_adapter(config, 3), final_adapter(straight, 3))


# --- what is dropped, and counted --------------------------------------------------------------


async def test_stale_samples_are_dropped_and_counted(store, tiny_model_dir, tmp_path):
    await fill(store, 4)  # every call sampled by version 0
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, max_staleness=0)
    await train(config, store)
    first, second = await stored_steps(store, RUN)
    assert first["version"] == 0 and first["samples_stale"] == 0 and first["samples"] == 8
    # after step 1 the learner holds version 1: version-0 samples are 1 behind, more than max_staleness 0
    assert second["version"] == 1 and second["samples_stale"] == 8 and second["samples"] == 0
    assert second["staleness_max"] == 1 and second["optimizer_stepped"] is False
    assert set((await statuses(store)).values()) == {"consumed"}  # stale groups are consumed, not retried


def sample(version: int, n: int = 6) -> Sample:
    mask = np.array([0, 0, 1, 1, 1, 1][:n], np.int8)
    return Sample(
        (1,),
        np.arange(n, dtype=np.int32),
        mask,
        np.zeros(n, np.float32),
        np.where(mask == 1, version, -1).astype(np.int32),
    )


def test_a_sample_is_as_old_as_its_oldest_sampled_token():
    mixed = sample(5)
    mixed.policy_versions[2] = 3  # an earlier turn sampled by version 3
    group = ReadyGroup(
        1, None, (RolloutData(1, 1.0, (mixed,)), RolloutData(2, 0.0, (sample(5),)), RolloutData(3, None, (sample(5),)))
    )
    batch = build_batch([group], learner_version=5, max_staleness=1)
    assert batch.staleness == (2, 0, 0) and batch.samples_stale == 1 and batch.samples_unscored == 1
    assert [s.rollout_id for s in batch.samples] == [2] and batch.samples[0].advantage == pytest.approx(-1.0)


async def test_zero_std_groups_are_dropped_and_counted(store, tiny_model_dir, tmp_path):
    await add_group(store, "same", [1.0, 1.0, 1.0, 1.0], seed=1)
    await add_group(store, "varied", [0.0, 1.0, 0.0, 1.0], seed=2)
    await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1), store)
    [metrics] = await stored_steps(store, RUN)
    assert metrics["groups_zero_std"] == 1 and metrics["groups_kept"] == 1
    assert metrics["frac_reward_zero_std"] == 0.5 and metrics["samples_unscored"] == 4
    assert metrics["samples"] == 4 and metrics["reward_mean"] == 0.75 and metrics["reward_mean_kept"] == 0.5
    assert set((await statuses(store)).values()) == {"consumed"}


async def test_a_step_that_trains_on_nothing_says_why_in_its_log_line(store, tiny_model_dir, tmp_path, caplog):
    await add_group(store, "same", [1.0, 1.0, 1.0, 1.0], seed=1)
    await add_group(store, "also-same", [0.0, 0.0, 0.0, 0.0], seed=2)
    with caplog.at_level(logging.INFO, logger="learner"):
        await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1), store)
    [metrics] = await stored_steps(store, RUN)
    assert metrics["samples"] == 0
    assert "step 1 trained on nothing of its 2 groups: 2 groups had zero reward spread" in caplog.text


# --- metrics -----------------------------------------------------------------------------------


async def test_each_step_stores_its_metrics_and_writes_tensorboard(store, tiny_model_dir, tmp_path):
    await fill(store, 4)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=2)
    await train(config, store)
    rows = await stored_steps(store, RUN)
    assert [row["step"] for row in rows] == [1, 2]
    for key in (
        "reward_mean",
        "reward_mean_kept",
        "frac_reward_zero_std",
        "samples",
        "tokens",
        "staleness_mean",
        "staleness_max",
        "ratio_min",
        "ratio_mean",
        "ratio_max",
        "is_masked_fraction",
        "clip_frac_low",
        "clip_frac_high",
        "entropy",
        "loss",
        "grad_norm",
        "step_time_s",
        "peak_rss_gib",
    ):
        assert isinstance(rows[0][key], (int, float)), key
    assert 0.1 < rows[0]["peak_rss_gib"] < 64  # a model's weights at least, in GiB
    assert rows[0]["swap_time_s"] is None  # nothing published
    assert rows[0]["tokens"] == 8 * 18 and rows[0]["tokens_sampled"] == 8 * 6  # 2 groups of 4, one call each
    assert list(Path(config.tensorboard_dir).glob("events.out.tfevents.*"))


# --- publishing --------------------------------------------------------------------------------


# --- config ------------------------------------------------------------------------------------


SIGNAL, FLAT = [[0.0, 1.0, 0.0, 1.0]] * 2, [[1.0, 1.0, 1.0, 1.0]] * 2  # two groups: one learner step


async def test_a_step_without_a_learning_signal_cuts_no_new_version(store, tiny_model_dir, tmp_path):
    for seed, rewards in enumerate((SIGNAL, FLAT, SIGNAL)):
        await add_groups(store, rewards, seed * 10)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, weight_sync_steps=1, publish_enabled=True)
    publisher = FlakyPublisher()
    publisher.failures = 0
    result = await train(config, store, publisher=publisher)
    assert publisher.published == [1, 2] and result.version == 2  # the flat step published nothing
    rows = await stored_steps(store, RUN)
    assert [row["optimizer_stepped"] for row in rows] == [True, False, True]
    assert [row["version"] for row in rows] == [0, 1, 1]  # the version each batch was built against
    assert [row["swap_time_s"] is None for row in rows] == [False, True, False]


async def test_weights_changed_before_a_restart_still_cut_a_version_after_it(store, tiny_model_dir, tmp_path):
    await add_groups(store, SIGNAL, 0)
    await add_groups(store, FLAT, 10)
    first = config_for(tiny_model_dir, tmp_path / "out", max_steps=1, weight_sync_steps=2, publish_enabled=True)
    publisher = FlakyPublisher()
    publisher.failures = 0
    await train(first, store, publisher=publisher)  # trained, checkpointed, not a publishing step
    assert publisher.published == []
    again = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=2, publish_enabled=True)
    result = await train(again, store, publisher=publisher)  # step 2 is flat, but step 1 changed the weights
    assert publisher.published == [1] and result.version == 1


# --- unusable groups and the run's temperature ------------------------------------------------


async def plant_reward(store: Store, rollout_id: int, reward: float) -> None:
    """Write a reward straight into the store (the API refuses it now; older stores may hold one)."""
    from sqlalchemy import update

    from store.tables import Rollout

    async with store.sessions.begin() as session:
        await session.execute(update(Rollout).where(Rollout.id == rollout_id).values(reward=reward))


async def test_a_group_with_an_infinite_reward_is_quarantined_and_the_learner_goes_on(store, tiny_model_dir, tmp_path):
    bad = await add_group(store, "poisoned", [0.0, 1.0, 0.0, 1.0], seed=5)
    await plant_reward(store, bad[1], float("inf"))
    good = await fill(store, 2)

    result = await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1), store)

    assert result.step == 1 and await history(store) == [tuple(good)]  # the next groups, in ready order
    [group] = [
        g
        for g, _, _ in await store.listings.groups(GroupFilter(run=RUN), 0, 100)
        if g.id == await group_of(store, bad[0])
    ]
    assert group.status == "quarantined" and "not finite" in group.error
    [metrics] = await stored_steps(store, RUN)
    assert metrics["groups_quarantined"] == 1 and metrics["groups"] == 2


async def test_a_group_whose_samples_the_model_cannot_take_is_quarantined(store, tiny_model_dir, tmp_path):
    identity = await store.create_rollout(RUN, "broken", group_size=2)
    other = await store.create_rollout(RUN, "broken", group_size=2)
    await store.insert_calls(
        [call_record(identity.rollout_id, prompt_ids=[5, 6, 7], output_ids=[10**7, 8], output_logprobs=[LOGPROB] * 2)]
    )  # no such token in the vocabulary
    await store.insert_calls([call_record(other.rollout_id, output_logprobs=[LOGPROB] * 2)])
    for rollout_id, reward in ((identity.rollout_id, 0.0), (other.rollout_id, 1.0)):
        await store.end_rollout(rollout_id, "finished", rewards={"verifier": reward})
    good = await fill(store, 2)

    result = await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1), store)

    assert result.step == 1 and await history(store) == [tuple(good)]
    assert (await statuses(store))[await group_of(store, identity.rollout_id)] == "quarantined"


async def test_the_learner_takes_log_probs_at_the_temperature_the_run_samples_at(store, tiny_model_dir, tmp_path):
    sampled = AskedSettings(sampling={"temperature": 0.5})
    await store.create_rollout(RUN, "first", group_size=2, settings=sampled)  # creates the run
    mixed = await add_group(store, "mixed", [0.0, 1.0], seed=7, end=False)
    await store.insert_calls([call_record(mixed[0], temperature=0.9)])  # sampled at another temperature
    for rollout_id, reward in zip(mixed, [0.0, 1.0]):
        await store.end_rollout(rollout_id, "finished", rewards={"verifier": reward})
    await fill(store, 2)

    await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1, temperature=1.0), store)

    [metrics] = await stored_steps(store, RUN)
    assert metrics["temperature"] == 0.5
    assert (await statuses(store))[await group_of(store, mixed[0])] == "quarantined"


async def test_a_greedy_run_is_refused_for_training(store, tiny_model_dir, tmp_path):
    greedy = AskedSettings(sampling={"temperature": 0.0})  # an evaluation run
    await store.create_rollout(RUN, "task-greedy", group_size=4, settings=greedy)
    await fill(store, 1)
    with pytest.raises(learner.loop.LearnerError, match="greedily"):
        await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1), store)
