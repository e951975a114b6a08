"""The learner's loop on a tiny random model: groups consumed in order and exactly once (also across
crashes), stale and zero-std data dropped and counted, metrics stored, adapters published."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import learner.loop
import learner.served_settings
import learner.trainer
from learner.config import ConfigError, LearnerConfig, with_overrides
from learner.config_file import config_from_dict, dump_toml, load_config
from learner.groups import ReadyGroup, RolloutData, build_batch
from learner.publish import GatewayUnreachable, Published, Publisher, PublishError
from store.database import sqlite_url
from store.listings import GroupFilter
from store.samples import Sample
from store.store import Store
from tests.builders import call_record, gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.learner_builders import lora_model
from tests.learner_reads import stored_checkpoints, stored_steps
from tests.learner_runs import tiny_learner_config, train_run
from tests.waiting import until

RUN = "learn"
ADMIN = "k"
LOGPROB = -7.6  # ~log(1 / vocab): the random model's log-probs, so importance ratios start near 1


class Crash(Exception):
    """Stands in for the process dying at a chosen point."""


# --- building stores ---------------------------------------------------------------------------


async def add_group(
    store: Store, task: str, rewards: list[float | None], *, version: int = 0, seed: int = 0, end: bool = True
) -> list[int]:
    """One group of len(rewards) rollouts with one call each; ended (so ready) unless end=False."""
    rng = np.random.default_rng(seed)
    rollout_ids = []
    for _ in rewards:
        identity = await store.create_rollout(RUN, task, group_size=len(rewards))
        prompt, output = rng.integers(10, 1000, 12).tolist(), rng.integers(10, 1000, 6).tolist()
        await store.insert_calls(
            [
                call_record(
                    identity.rollout_id,
                    prompt_ids=prompt,
                    output_ids=output,
                    output_logprobs=[LOGPROB] * 6,
                    policy_version=version,
                )
            ]
        )
        rollout_ids.append(identity.rollout_id)
    if end:
        for rollout_id, reward in zip(rollout_ids, rewards):
            await store.end_rollout(rollout_id, "finished", rewards={"verifier": reward})
    return rollout_ids


async def group_of(store: Store, rollout_id: int) -> int:
    return (await store.get_rollout(rollout_id))[0].group_id


async def fill(store: Store, n: int) -> list[int]:
    """n ready groups with a learning signal; returns their ids in ready order."""
    groups = []
    for k in range(n):
        rollouts = await add_group(store, f"task-{k}", [0.0, 1.0, float(k % 3), 0.5], seed=k)
        groups.append(await group_of(store, rollouts[0]))
    return groups


@pytest.fixture
async def store(sqlite_db: str) -> AsyncIterator[Store]:
    store = Store.from_url(sqlite_db)
    yield store
    await store.close()


@pytest.fixture
async def reference_store(tmp_path: Path, migrated_sqlite_file: Path) -> AsyncIterator[Store]:
    """A second migrated store, to train the same data straight through for comparison."""
    path = tmp_path / "reference.db"
    shutil.copyfile(migrated_sqlite_file, path)
    store = Store.from_url(sqlite_url(path))
    yield store
    await store.close()


def config_for(tiny_model_dir: Path, out: Path, **overrides) -> LearnerConfig:
    return tiny_learner_config(tiny_model_dir, out, **overrides)


async def train(config: LearnerConfig, store: Store, **kwargs):
    return await train_run(config, store, RUN, **kwargs)


async def history(store: Store) -> list[tuple[int, ...]]:
    return [record.group_ids for record in await stored_checkpoints(store, RUN)]


def final_adapter(config: LearnerConfig, step: int) -> dict[str, torch.Tensor]:
    return load_file(Path(config.checkpoint.dir) / f"step-{step:08d}" / "adapter" / "adapter_model.safetensors")


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)


async def statuses(store: Store) -> dict[int, str]:
    return {g.id: g.status for g, _, _ in await store.listings.groups(GroupFilter(run=RUN), 0, 1000)}


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
    store, reference_store, tiny_model_dir, tmp_path, monkeypatch
):
    groups = await fill(store, 8)
    await fill(reference_store, 8)  # the same data, trained straight through
    reference = config_for(tiny_model_dir, tmp_path / "ref", max_steps=4, checkpoint_every=2)
    await train(reference, reference_store)

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
    store, reference_store, tiny_model_dir, tmp_path, monkeypatch
):
    groups = await fill(store, 6)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3)
    real_commit = learner.loop.commit_checkpoint
    calls = {"n": 0}

    async def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Crash("killed after writing step 2, before committing it")
        return await real_commit(*args, **kwargs)

    monkeypatch.setattr(learner.loop, "commit_checkpoint", crashing)
    with pytest.raises(Crash):
        await train(config, store)
    orphan = Path(config.checkpoint.dir) / "step-00000002"
    assert (orphan / "trainer.pt").exists()  # complete on disk, but the store never recorded it
    assert await history(store) == [tuple(groups[:2])]
    assert (await statuses(store))[groups[2]] == "ready"
    monkeypatch.setattr(learner.loop, "commit_checkpoint", real_commit)

    result = await train(config, store)

    assert result.step == 3
    assert await history(store) == [tuple(groups[:2]), tuple(groups[2:4]), tuple(groups[4:])]
    assert set((await statuses(store)).values()) == {"consumed"}
    # The resumed run reloaded step 1, retrained groups 2-3 and wrote step 2 again: the same weights as
    # training the same data straight through.
    await fill(reference_store, 6)
    straight = config_for(tiny_model_dir, tmp_path / "straight", max_steps=3)
    await train(straight, reference_store)
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
    ):
        assert isinstance(rows[0][key], (int, float)), key
    assert rows[0]["swap_time_s"] is None  # nothing published
    assert rows[0]["tokens"] == 8 * 18 and rows[0]["tokens_sampled"] == 8 * 6  # 2 groups of 4, one call each
    assert list(Path(config.tensorboard_dir).glob("events.out.tfevents.*"))


# --- publishing --------------------------------------------------------------------------------


@pytest.fixture
async def admin_gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    # max_staleness 2: the learner takes the gateway's, so version-0 samples still train its third step
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key=ADMIN, max_staleness=2)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


def gateway_publisher(gateway: GatewayHarness, config: LearnerConfig) -> Publisher:
    return Publisher("http://gateway", ADMIN, Path(config.publish.adapters_dir), client=gateway.http)


async def test_each_new_version_is_published_through_the_admin_endpoint(admin_gateway, store, tiny_model_dir, tmp_path):
    await fill(store, 6)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, weight_sync_steps=1, publish=True)
    await train(config, store, publisher=gateway_publisher(admin_gateway, config))
    policy = (await admin_gateway.http.get("/admin/policy")).json()
    assert policy["current_version"] == 3
    assert set(admin_gateway.fake.adapters) == {"policy-v1", "policy-v2", "policy-v3"}  # max_staleness 2
    assert admin_gateway.fake.adapters["policy-v3"] == str(Path(config.publish.adapters_dir) / "policy-v3")
    assert (Path(config.publish.adapters_dir) / "policy-v3" / "adapter_config.json").exists()
    rows = await stored_steps(store, RUN)
    assert all(row["swap_time_s"] > 0 for row in rows)
    # a rollout started now is served by the newest adapter
    headers = {"x-admin-key": ADMIN}
    rollout = (
        await admin_gateway.http.post("/api/rollouts", json={"run": RUN, "task": "next"}, headers=headers)
    ).json()
    answer = await admin_gateway.http.post(
        f"/r/{rollout['token']}/v1/chat/completions",
        json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 200 and admin_gateway.fake.requests[-1]["model"] == "policy-v3"
    # keep_checkpoints = 2: older committed checkpoints are pruned
    assert sorted(p.name for p in Path(config.checkpoint.dir).iterdir()) == ["step-00000002", "step-00000003"]


class FlakyPublisher:
    """A gateway that is unreachable for the first publication."""

    def __init__(self):
        self.published: list[int] = []
        self.failures = 1

    async def current_version(self) -> int:
        return self.published[-1] if self.published else 0

    async def max_model_len(self) -> int | None:
        raise GatewayUnreachable("connection refused")

    async def max_staleness(self) -> int | None:
        raise GatewayUnreachable("connection refused")

    async def publish(self, model, version: int, probe_ids=None):
        if self.failures:
            self.failures -= 1
            raise GatewayUnreachable("connection refused")
        self.published.append(version)
        return Published(version, f"policy-v{version}", "/a", 0.01, 0.02, 0.01, 1)


async def test_an_unreachable_gateway_delays_publishing_but_not_training(store, tiny_model_dir, tmp_path):
    await fill(store, 6)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, weight_sync_steps=1, publish=True)
    publisher = FlakyPublisher()
    result = await train(config, store, publisher=publisher)
    assert result.step == 3 and publisher.published == [2, 3]
    rows = await stored_steps(store, RUN)
    assert [row["swap_time_s"] for row in rows] == [None, 0.02, 0.02]


async def test_the_token_budget_defaults_to_the_engines_max_model_len(
    admin_gateway, store, tiny_model_dir, tmp_path, caplog
):
    config = config_for(tiny_model_dir, tmp_path / "out", publish=True)
    assert config.batch.token_budget == 0  # the default: ask the gateway
    trainer = learner.trainer.build_trainer(config)
    view = (await admin_gateway.http.get("/admin/policy", headers={"x-admin-key": ADMIN})).json()
    served = view["max_model_len"]
    assert served and served != learner.served_settings.FALLBACK_TOKEN_BUDGET  # the fake engine's
    with caplog.at_level(logging.INFO, logger="learner"):
        resolved = await learner.served_settings.resolve_token_budget(
            config, gateway_publisher(admin_gateway, config), trainer
        )
    assert resolved.batch.token_budget == served
    assert f"token_budget = {served} (the engine's max model length)" in caplog.text
    assert "tokens fit in one step" in caplog.text  # how long a sample the memory holds
    kept = await learner.served_settings.resolve_token_budget(with_overrides(config, token_budget=777), None, trainer)
    assert kept.batch.token_budget == 777  # the config's override wins
    offline = await learner.served_settings.resolve_token_budget(with_overrides(config, publish=False), None, trainer)
    assert offline.batch.token_budget == learner.served_settings.FALLBACK_TOKEN_BUDGET


async def test_samples_longer_than_the_budget_are_refused_and_counted(store, tiny_model_dir, tmp_path):
    await fill(store, 2)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=1, token_budget=3)  # every sample is longer
    await train(config, store)
    [row] = await stored_steps(store, RUN)
    assert row["samples_too_long"] == 8 and row["samples"] == 0 and row["optimizer_stepped"] is False


async def test_a_committed_version_not_yet_published_is_published_on_restart(
    admin_gateway, store, tiny_model_dir, tmp_path
):
    await fill(store, 4)
    offline = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=2, publish=False)
    await train(offline, store)  # step 2 committed; as if killed before its publication
    assert (await admin_gateway.http.get("/admin/policy")).json()["current_version"] == 0
    online = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=2, publish=True)
    result = await train(online, store, publisher=gateway_publisher(admin_gateway, online))
    assert result.step == 2  # nothing trained again
    assert (await admin_gateway.http.get("/admin/policy")).json()["current_version"] == 1
    assert "policy-v1" in admin_gateway.fake.adapters


async def test_publishing_retries_transport_errors_then_names_the_fix(tmp_path):
    failures = {"left": 2}
    sleeps: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(
            200,
            json={
                "version": 1,
                "name": "policy-v1",
                "load_s": 0.01,
                "unloaded": [],
                "loaded": {"0": "base", "1": "policy-v1"},
            },
        )

    async def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    model = lora_model()
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    publisher = Publisher("http://gw", ADMIN, tmp_path / "adapters", retries=3, client=client, sleep=no_sleep)
    published = await publisher.publish(model, 1)
    assert published.attempts == 3 and sleeps == [0.5, 1.0] and published.engine_load_s == 0.01

    failures["left"] = 10
    with pytest.raises(GatewayUnreachable, match="harnessrl serve"):
        await publisher.publish(model, 2)
    assert sleeps[2:] == [0.5, 1.0, 2.0]  # bounded: retries + 1 attempts

    refused = Publisher(
        "http://gw",
        "wrong",
        tmp_path / "adapters",
        client=httpx.AsyncClient(
            transport=httpx.MockTransport(lambda r: httpx.Response(401, json={"error": {"message": "bad admin key"}}))
        ),
    )
    with pytest.raises(PublishError, match="admin_key") as error:
        await refused.publish(model, 3)
    assert not isinstance(error.value, GatewayUnreachable)


# --- config ------------------------------------------------------------------------------------


def test_unknown_config_keys_are_errors_naming_the_key(tmp_path):
    path = tmp_path / "learner.toml"
    path.write_text('model_dir = "/m"\nlora_rnak = 8\n')
    with pytest.raises(ConfigError, match="unknown key 'lora_rnak'"):
        load_config(path)
    with pytest.raises(ConfigError, match="unknown key \\[lora\\] 'rnak'"):
        config_from_dict({"lora": {"rnak": 8}})
    with pytest.raises(ConfigError, match="optimizer.lr .* must be like"):
        config_from_dict({"lr": "fast"})
    with pytest.raises(ConfigError, match="scheduler = 'cosine' decays until max_steps"):
        config_from_dict({"scheduler": "cosine"})
    with pytest.raises(ConfigError, match="forward.kernel must be one of auto, sdpa, flash"):
        config_from_dict({"attn_implementation": "eager"})  # the packed path never takes a dense mask
    with pytest.raises(ConfigError, match="token_budget must not be negative"):
        config_from_dict({"token_budget": -1})


def test_the_learner_config_defaults_to_long_rows_and_the_machines_dtype():
    config = LearnerConfig()
    assert config.batch.token_budget == 0 and config.dtype == "auto" and config.batch.tree_packing
    step = config.step()
    assert step.forward.kernel == "auto" and step.forward.activation_checkpointing
    assert learner.trainer.training_dtype(config, torch.device("cuda")) == torch.bfloat16
    assert learner.trainer.training_dtype(config, torch.device("cpu")) == torch.float32


def test_the_default_config_round_trips_through_toml(tmp_path):
    path = tmp_path / "learner.toml"
    path.write_text(dump_toml(LearnerConfig()))
    assert load_config(path) == LearnerConfig()
    path.write_text("lr = 1\nlora_targets = ['q_proj']\nadam_betas = [0.9, 1]\n")
    loaded = load_config(path, max_steps=5)
    assert (
        loaded.optimizer.lr == 1.0 and loaded.lora.targets == ("q_proj",) and loaded.optimizer.adam_betas == (0.9, 1.0)
    )
    assert loaded.max_steps == 5


def test_a_sectioned_config_loads_and_the_old_flat_form_still_does_naming_the_sections(tmp_path, caplog):
    sectioned, flat = tmp_path / "sectioned.toml", tmp_path / "flat.toml"
    sectioned.write_text(
        'model_dir = "/m"\n[lora]\nrank = 8\n[optimizer]\nlr = 0.01\n'
        "[publish]\nenabled = false\n[checkpoint]\nkeep = 3\n"
    )
    flat.write_text('model_dir = "/m"\nlora_rank = 8\nlr = 0.01\npublish = false\nkeep_checkpoints = 3\n')
    with caplog.at_level(logging.WARNING, logger="learner.config"):
        assert load_config(sectioned) == load_config(flat)
    assert "lora_rank -> [lora] rank" in caplog.text and "publish -> [publish] enabled" in caplog.text
    assert str(sectioned) not in caplog.text  # only the flat file is warned about
    loaded = load_config(sectioned)
    assert (loaded.lora.rank, loaded.optimizer.lr, loaded.publish.enabled, loaded.checkpoint.keep) == (
        8,
        0.01,
        False,
        3,
    )
    assert loaded.loss == LearnerConfig().loss  # [loss] is learner.loss.LossConfig itself, its own defaults


async def test_a_publishing_learner_drops_samples_by_the_gateways_max_staleness(
    sqlite_db, fake_engine, fake_engine_server, store, tiny_model_dir, tmp_path
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key=ADMIN, max_staleness=0)
    async for gateway in start_gateway(settings, fake_engine):
        await fill(store, 4)  # every call sampled by version 0; the config would keep 100 versions
        config = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, publish=True)
        await train(config, store, publisher=gateway_publisher(gateway, config))
    first, second = await stored_steps(store, RUN)
    assert first["samples_stale"] == 0 and second["version"] == 1 and second["samples_stale"] == 8


async def test_publishing_waits_out_a_briefly_unavailable_engine(tmp_path):
    answers = [503, 503, 200]
    sleeps: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = answers.pop(0) if answers else 503
        if status == 503:
            return httpx.Response(503, json={"error": {"message": "engine at http://e failed: ClientOSError"}})
        return httpx.Response(
            200,
            json={
                "version": 1,
                "name": "policy-v1",
                "load_s": 0.01,
                "unloaded": [],
                "loaded": {"0": "base", "1": "policy-v1"},
            },
        )

    async def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    publisher = Publisher("http://gw", ADMIN, tmp_path / "adapters", retries=3, client=client, sleep=no_sleep)
    assert (await publisher.publish(lora_model(), 1)).attempts == 3 and sleeps == [0.5, 1.0]
    with pytest.raises(PublishError, match="HTTP 503"):
        await publisher.publish(lora_model(), 2)  # still down after retries + 1 attempts: raised, named
    assert len(sleeps) == 2 + 3


async def add_groups(store: Store, rewards: list[list[float]], seed: int) -> None:
    for k, group in enumerate(rewards):
        await add_group(store, f"task-{seed}-{k}", group, seed=seed + k)


SIGNAL, FLAT = [[0.0, 1.0, 0.0, 1.0]] * 2, [[1.0, 1.0, 1.0, 1.0]] * 2  # two groups: one learner step


async def test_a_step_without_a_learning_signal_cuts_no_new_version(store, tiny_model_dir, tmp_path):
    for seed, rewards in enumerate((SIGNAL, FLAT, SIGNAL)):
        await add_groups(store, rewards, seed * 10)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, weight_sync_steps=1, publish=True)
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
    first = config_for(tiny_model_dir, tmp_path / "out", max_steps=1, weight_sync_steps=2, publish=True)
    publisher = FlakyPublisher()
    publisher.failures = 0
    await train(first, store, publisher=publisher)  # trained, checkpointed, not a publishing step
    assert publisher.published == []
    again = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=2, publish=True)
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
    await store.create_rollout(RUN, "first", group_size=2, sampling={"temperature": 0.5})  # creates the run
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
    await store.create_rollout(RUN, "task-greedy", group_size=4, sampling={"temperature": 0.0})  # an evaluation run
    await fill(store, 1)
    with pytest.raises(learner.loop.LearnerError, match="greedily"):
        await train(config_for(tiny_model_dir, tmp_path / "out", max_steps=1), store)


class WarmStartedGateway:
    """A gateway already serving the warm start (harnessrl sft --publish) as policy-v1."""

    def __init__(self):
        self.published: list[int] = [1]

    async def current_version(self) -> int:
        return self.published[-1]

    async def max_model_len(self) -> int | None:
        return None

    async def max_staleness(self) -> int | None:
        return None

    async def publish(self, model, version: int, probe_ids=None):
        self.published.append(version)
        return Published(version, f"policy-v{version}", "/a", 0.01, 0.02, 0.01, 1)


async def test_a_learner_starting_at_the_warm_starts_version_publishes_the_next_ones(store, tiny_model_dir, tmp_path):
    await fill(store, 4)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=1, publish=True)
    with pytest.raises(learner.loop.LearnerError, match="serves policy-v1, newer"):
        await train(config, store, publisher=WarmStartedGateway())  # without init_version: refused
    gateway = WarmStartedGateway()
    result = await train(with_overrides(config, init_version=1), store, publisher=gateway)
    assert (result.step, result.version, gateway.published) == (2, 3, [1, 2, 3])
