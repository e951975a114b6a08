"""The learner publishing its versions through the gateway's admin endpoint: retried, delayed, resumed
after a restart, from a warm start's version; its token budget from the engine's context."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import learner.loop
import learner.served_settings
import learner.trainer
from learner.config import LearnerConfig
from learner.publish import GatewayUnreachable, Published, Publisher, PublishError
from store.store import Store
from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.learner_builders import lora_model
from tests.learner_groups import (
    ADMIN,
    RUN,
    FlakyPublisher,
    config_for,
    fill,
    train,
)
from tests.learner_reads import stored_steps


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
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, weight_sync_steps=1, publish_enabled=True)
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


async def test_an_unreachable_gateway_delays_publishing_but_not_training(store, tiny_model_dir, tmp_path):
    await fill(store, 6)
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, weight_sync_steps=1, publish_enabled=True)
    publisher = FlakyPublisher()
    result = await train(config, store, publisher=publisher)
    assert result.step == 3 and publisher.published == [2, 3]
    rows = await stored_steps(store, RUN)
    assert [row["swap_time_s"] for row in rows] == [None, 0.02, 0.02]


async def test_the_token_budget_defaults_to_the_engines_max_model_len(
    admin_gateway, store, tiny_model_dir, tmp_path, caplog
):
    config = config_for(tiny_model_dir, tmp_path / "out", publish_enabled=True)
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
    kept = await learner.served_settings.resolve_token_budget(
        config.updated(batch={"token_budget": 777}), None, trainer
    )
    assert kept.batch.token_budget == 777  # the config's override wins
    offline = await learner.served_settings.resolve_token_budget(
        config.updated(publish={"enabled": False}), None, trainer
    )
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
    offline = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=2, publish_enabled=False)
    await train(offline, store)  # step 2 committed; as if killed before its publication
    assert (await admin_gateway.http.get("/admin/policy")).json()["current_version"] == 0
    online = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=2, publish_enabled=True)
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


async def test_a_publishing_learner_drops_samples_by_the_gateways_max_staleness(
    sqlite_db, fake_engine, fake_engine_server, store, tiny_model_dir, tmp_path
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key=ADMIN, max_staleness=0)
    async for gateway in start_gateway(settings, fake_engine):
        await fill(store, 4)  # every call sampled by version 0; the config would keep 100 versions
        config = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, publish_enabled=True)
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
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=2, weight_sync_steps=1, publish_enabled=True)
    with pytest.raises(learner.loop.LearnerError, match="serves policy-v1, newer"):
        await train(config, store, publisher=WarmStartedGateway())  # without init_version: refused
    gateway = WarmStartedGateway()
    result = await train(config.updated(lora={"init_version": 1}), store, publisher=gateway)
    assert (result.step, result.version, gateway.published) == (2, 3, [1, 2, 3])


@pytest.fixture
def store(file_store: Store) -> Store:
    return file_store
