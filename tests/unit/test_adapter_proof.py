"""Proof of the serving adapter: a publication carries the adapter's digest and a probe; the gateway
checks every engine computes with it before serving it, records the digest on each call it serves, and
the learner refuses calls whose digest is not their version's. The fake engine moves every prompt
log-prob by ``adapter_shift`` under a loaded adapter, or not at all when it ignores loads."""

from __future__ import annotations

import copy
import math
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import torch

from contracts.adapter_proof import NOISE_MARGIN, AdapterProbe, adapter_digest, judge, probe_tolerance
from learner.adapter_probe import adapter_probe, fallback_probe_ids, probe_ids_from
from learner.groups import UnusableGroup, check_group, load_group
from store.store import Store
from tests.builders import call_record, gateway_settings
from tests.engine_pool import fake_engines, pool_gateway
from tests.fake_tokens import next_logprob_at, next_token
from tests.gateway_harness import GatewayHarness, gateway_on, start_gateway
from tests.learner_builders import VOCAB, lora_model
from tests.waiting import until

TOLERANCE = 1e-3
PROBE_IDS = (300, 301, 302, 303, 304, 305, 306, 307)
SHIFT = -0.5  # the fake engine's adapter effect (FakeEngine.adapter_shift)


def fake_probe(shift: float = SHIFT) -> dict:
    """What a learner would send for the fake engine's model: after each prefix, the fake's likeliest next
    token at its base log-prob, moved by ``shift`` under the adapter."""
    prefixes = list(range(2, len(PROBE_IDS) + 1))
    base = [next_logprob_at(n) for n in prefixes]
    return {
        "token_ids": list(PROBE_IDS),
        "prefixes": prefixes,
        "targets": [next_token(list(PROBE_IDS[:n])) for n in prefixes],
        "logprobs": [x + shift for x in base],
        "base_logprobs": base,
        "dtype": "float32",
    }


def adapter_folder(root: Path, version: int, weights: bytes = b"weights") -> Path:
    folder = root / f"policy-v{version}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 8}')
    (folder / "adapter_model.safetensors").write_bytes(weights + bytes([version]))
    return folder


async def publish(gateway: GatewayHarness, version: int, folder: Path, **claim):
    body = {"version": version, "path": str(folder), **claim}
    return await gateway.http.post("/admin/adapters", json=body)


@pytest.fixture
async def proving_gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, adapter_probe_tolerance=TOLERANCE)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


async def served_call(gateway: GatewayHarness) -> dict:
    rollout = await gateway.new_rollout(run="proof")
    answer = await gateway.http.post(
        f"/r/{rollout['token']}/v1/chat/completions",
        json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 200, answer.text
    [listed] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    return (await gateway.http.get(f"/api/calls/{listed['id']}")).json()


# --- the gateway ---------------------------------------------------------------------------------


async def test_a_proven_publication_records_its_digest_on_every_call_it_serves(proving_gateway, tmp_path):
    folder = adapter_folder(tmp_path, 1)
    digest = adapter_digest(folder)
    response = await publish(proving_gateway, 1, folder, digest=digest, probe=fake_probe())
    assert response.status_code == 200, response.text
    [proof] = response.json()["proof"]
    assert proof["passed"] and proof["distinguishable"] and proof["mean_abs"] == pytest.approx(0.0, abs=1e-9)
    assert proof["base_mean_abs"] == pytest.approx(0.5) and response.json()["digest"] == digest
    assert (await proving_gateway.http.get("/admin/policy")).json()["digests"] == {"1": digest}

    call = await served_call(proving_gateway)
    assert (call["policy_version"], call["adapter_digest"]) == (1, digest)
    stored = await proving_gateway.state.store.adapters.get("policy", 1)
    assert stored.digest == digest and stored.probe["token_ids"] == list(PROBE_IDS) and stored.proof[0]["passed"]


async def test_an_engine_that_ignores_a_lora_load_fails_the_publication_and_the_previous_version_serves(
    proving_gateway, tmp_path
):
    gw = proving_gateway
    first = adapter_folder(tmp_path, 1)
    assert (await publish(gw, 1, first, probe=fake_probe())).status_code == 200
    gw.fake.ignore_loads = True  # the load answers 200; the base model serves under the new name

    response = await publish(gw, 2, adapter_folder(tmp_path, 2), probe=fake_probe())
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "adapter_not_applied"
    assert "does not compute with it" in error["message"] and "closer to the base model" in error["message"]
    assert "--enable-lora" in error["message"]
    assert "policy-v2" not in gw.fake.adapters  # unloaded again
    assert await gw.state.store.adapters.get("policy", 2) is None  # never recorded as published
    policy = (await gw.http.get("/admin/policy")).json()
    assert policy["current_version"] == 1
    call = await served_call(gw)
    assert (call["policy_version"], call["adapter_digest"]) == (1, adapter_digest(first))


async def test_an_adapter_the_probe_cannot_tell_from_the_base_is_served_and_says_so(proving_gateway, tmp_path):
    response = await publish(proving_gateway, 1, adapter_folder(tmp_path, 1), probe=fake_probe(shift=0.0))
    proving_gateway.fake.adapter_shift = 0.0  # an adapter that changes nothing (LoRA's B still zero)
    assert response.status_code == 502  # the engine's adapter moved the probe; the learner's did not
    response = await publish(proving_gateway, 2, adapter_folder(tmp_path, 2), probe=fake_probe(shift=0.0))
    [proof] = response.json()["proof"]
    assert proof["passed"] and not proof["distinguishable"]


async def test_an_engines_own_noise_on_the_base_model_widens_its_tolerance_and_still_catches_an_ignored_load(
    proving_gateway, tmp_path
):
    proving_gateway.fake.numerics_noise = 0.05  # 50x the floor: another CPU's kernels
    response = await publish(proving_gateway, 1, adapter_folder(tmp_path, 1), probe=fake_probe())
    assert response.status_code == 200, response.text
    [proof] = response.json()["proof"]
    assert proof["noise"] == pytest.approx(0.05) and proof["tolerance"] == pytest.approx(NOISE_MARGIN * 0.05)
    assert proof["passed"] and proof["distinguishable"] and proof["mean_abs"] == pytest.approx(0.05)

    proving_gateway.fake.ignore_loads = True  # the same noisy engine serving the base model under the name
    response = await publish(proving_gateway, 2, adapter_folder(tmp_path, 2), probe=fake_probe())
    assert response.status_code == 502 and response.json()["error"]["code"] == "adapter_not_applied"
    assert "its own noise on the base model 0.05" in response.json()["error"]["message"]


async def test_a_folder_rewritten_after_the_learner_hashed_it_is_refused(proving_gateway, tmp_path):
    folder = adapter_folder(tmp_path, 1)
    claimed = adapter_digest(folder)
    (folder / "adapter_model.safetensors").write_bytes(b"other weights")
    response = await publish(proving_gateway, 1, folder, digest=claimed)
    assert response.status_code == 400 and response.json()["error"]["param"] == "digest"
    assert "something rewrote it" in response.json()["error"]["message"]
    assert (await proving_gateway.http.get("/admin/policy")).json()["current_version"] == 0


async def restarted_after_publishing(
    sqlite_db, fake_engine, fake_engine_server, folder: Path, between
) -> AsyncIterator[GatewayHarness]:
    """A gateway that published v1 (proven), stopped; ``between(fake_engine)`` ran; a new one started over
    the same store, engine restarted too (its adapters gone)."""
    settings = gateway_settings(sqlite_db, fake_engine_server.url, adapter_probe_tolerance=TOLERANCE)
    async for gw in start_gateway(settings, fake_engine):
        assert (await publish(gw, 1, folder, probe=fake_probe())).status_code == 200
    fake_engine.adapters.clear()
    between(fake_engine)
    async for gw in start_gateway(settings, fake_engine):
        yield gw


async def test_a_restarted_gateway_proves_a_restored_version_again(
    sqlite_db, fake_engine, fake_engine_server, tmp_path
):
    folder = adapter_folder(tmp_path, 1)
    async for gw in restarted_after_publishing(sqlite_db, fake_engine, fake_engine_server, folder, lambda e: None):
        call = await served_call(gw)
        assert (call["policy_version"], call["adapter_digest"]) == (1, adapter_digest(folder))


@pytest.mark.parametrize(
    "between",
    [
        pytest.param(lambda engine: setattr(engine, "ignore_loads", True), id="engine-ignores-the-reload"),
        pytest.param(lambda engine: None, id="folder-rewritten-while-down"),
    ],
)
async def test_a_restored_version_that_is_not_what_was_published_never_serves(
    sqlite_db, fake_engine, fake_engine_server, tmp_path, between
):
    folder = adapter_folder(tmp_path, 1)

    def tamper(engine) -> None:
        between(engine)
        if not engine.ignore_loads:
            (folder / "adapter_model.safetensors").write_bytes(b"other weights")

    async for gw in restarted_after_publishing(sqlite_db, fake_engine, fake_engine_server, folder, tamper):
        call = await served_call(gw)
        assert (call["policy_version"], call["adapter_digest"]) == (0, None)
        assert "policy-v1" not in gw.fake.adapters  # unloaded again after the failed proof
        assert not (await gw.state.store.adapters.get("policy", 1)).loaded  # marked: the next restart does not try it


@pytest.mark.parametrize(
    "probe",
    [
        {**fake_probe(), "logprobs": fake_probe()["logprobs"][:-1]},  # one value short
        {**fake_probe(), "logprobs": [0.5] * (len(PROBE_IDS) - 1)},  # a log-prob above 0
        {**fake_probe(), "prefixes": [0] + fake_probe()["prefixes"][1:]},  # a prefix of no token
        {**fake_probe(), "token_ids": [-1] + list(PROBE_IDS[1:])},
        {**fake_probe(), "dtype": "int8"},
    ],
)
async def test_a_malformed_probe_is_a_400_before_the_engine_is_touched(proving_gateway, tmp_path, probe):
    response = await publish(proving_gateway, 1, adapter_folder(tmp_path, 1), probe=probe)
    assert response.status_code == 400, response.text
    assert proving_gateway.fake.adapters == {}


async def test_a_follower_does_not_serve_a_version_its_engine_does_not_apply(sqlite_db, tmp_path):
    async with AsyncExitStack() as stack:
        settings = {"follow_interval_s": 0.1, "adapter_probe_tolerance": TOLERANCE}
        a = await stack.enter_async_context(gateway_on(sqlite_db, stack, **settings))
        b = await stack.enter_async_context(gateway_on(sqlite_db, stack, **settings))
        b.fake.ignore_loads = True
        assert (await publish(a, 1, adapter_folder(tmp_path, 1), probe=fake_probe())).status_code == 200
        await until(lambda: "policy-v1" in b.state.refused_versions, "b refused policy-v1")
        assert (await b.http.get("/admin/policy")).json()["current_version"] == 0
        assert "policy-v1" not in b.fake.adapters
        b.fake.ignore_loads = False
        assert (await publish(a, 2, adapter_folder(tmp_path, 2), probe=fake_probe())).status_code == 200

        async def b_serves_v2() -> bool:
            return (await b.http.get("/admin/policy")).json()["current_version"] == 2

        await until(b_serves_v2, "b follows policy-v2")


# --- the comparison and the digest ----------------------------------------------------------------


def test_the_tolerance_is_the_coarser_dtypes_and_an_override_wins():
    assert probe_tolerance("float32", "float32") == pytest.approx(1e-3)
    assert probe_tolerance("bfloat16", "float32") == probe_tolerance(None, "float32") == pytest.approx(0.15)
    assert probe_tolerance("float32", "float32", override=0.5) == 0.5


def test_an_engine_answering_minus_infinity_is_infinitely_far():
    probe = AdapterProbe((1, 2, 3), (2, 3), (7, 8), (-1.0, -2.0), (-1.5, -2.5), "float32")
    assert judge("e", [-1.0, -2.0], probe, 1e-3).passed
    far = judge("e", [-math.inf, -2.0], probe, 1e-3)
    assert far.mean_abs == math.inf and not far.passed


def test_the_noise_leaves_out_tokens_the_engine_did_not_rank_and_only_widens_the_floor():
    probe = AdapterProbe.from_json(fake_probe())
    engine = list(probe.logprobs)
    quiet = judge("e", engine, probe, 0.3, engine_base_logprobs=list(probe.base_logprobs))
    assert (quiet.noise, quiet.tolerance) == (0.0, 0.3)
    off = [x + 0.05 for x in probe.base_logprobs[:-1]] + [-math.inf]
    noisy = judge("e", engine, probe, 0.3, engine_base_logprobs=off)
    assert noisy.noise == pytest.approx(0.05) and noisy.tolerance == pytest.approx(NOISE_MARGIN * 0.05)
    assert not judge("e", [x + 0.5 for x in engine], probe, 0.3, engine_base_logprobs=off).passed


def test_an_engine_far_nearer_the_adapter_than_the_base_passes_past_its_tolerance_and_the_base_does_not():
    # CI's bfloat16 engine: 0.19 nats from a large adapter, past the floor, while the base model is 1.0 away
    probe = AdapterProbe((1, 2, 3), (2, 3), (7, 8), (-1.0, -2.0), (-2.0, -3.0), "float32")
    near = judge("e", [-1.19, -2.19], probe, 0.15, engine_base_logprobs=[-2.01, -3.01])
    assert near.mean_abs == pytest.approx(0.19) and near.mean_abs > near.tolerance and near.passed
    serving_base = judge("e", [-2.01, -3.01], probe, 0.15, engine_base_logprobs=[-2.01, -3.01])
    assert serving_base.distinguishable and not serving_base.passed
    halfway = judge("e", [-1.5, -2.5], probe, 0.15, engine_base_logprobs=[-2.01, -3.01])
    assert not halfway.passed  # as near the base as the adapter: no proof either way is a failure
    assert not judge("e", [-math.inf, -math.inf], probe, 0.15).passed


def test_the_digest_covers_the_weights_and_config_and_nothing_else(tmp_path):
    folder = adapter_folder(tmp_path, 1)
    before = adapter_digest(folder)
    (folder / "README.md").write_text("peft's model card")
    assert adapter_digest(folder) == before
    (folder / "adapter_config.json").write_text('{"r": 16}')
    assert adapter_digest(folder) != before


# --- the learner ---------------------------------------------------------------------------------


def test_the_learners_probe_is_its_log_probs_with_and_without_the_adapter():
    model = lora_model(moved=True).train()
    ids = fallback_probe_ids(VOCAB, length=16)
    probe = adapter_probe(model, ids, checks=4)
    assert model.training  # the mode it had
    assert probe.token_ids == ids and probe.dtype == "float32" and probe.prefixes == tuple(range(13, 17))
    model.eval()
    for j, length in enumerate(probe.prefixes):  # each check: the adapter's likeliest next token, both ways
        with torch.no_grad():
            adapted = torch.log_softmax(model(input_ids=torch.tensor([ids[:length]])).logits[0, -1], -1)
            with model.disable_adapter():
                base = torch.log_softmax(model(input_ids=torch.tensor([ids[:length]])).logits[0, -1], -1)
        assert probe.targets[j] == int(adapted.argmax())
        assert probe.logprobs[j] == pytest.approx(float(adapted.max()), abs=1e-5)
        assert probe.base_logprobs[j] == pytest.approx(float(base[probe.targets[j]]), abs=1e-5)
    assert judge("e", probe.logprobs, probe, 1e-3).distinguishable  # a moved adapter shows on it
    assert probe_ids_from(torch.arange(300).numpy(), 5) == (295, 296, 297, 298, 299)


def test_the_base_models_log_probs_are_taken_once_per_probe(monkeypatch):
    model = lora_model(moved=True)
    ids = fallback_probe_ids(VOCAB, length=16)
    adapter_probe(model, ids, checks=4)
    with torch.no_grad():  # a step: the adapter moves, the base model's weights never do
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
    fresh = adapter_probe(copy.deepcopy(model), ids, checks=4)  # another model: its base computed anew
    calls = []
    real = model.disable_adapter
    monkeypatch.setattr(model, "disable_adapter", lambda: calls.append(1) or real())
    assert adapter_probe(model, ids, checks=4) == fresh and calls == []
    adapter_probe(model, ids[:-1], checks=4)  # another probe: its own base log-probs
    assert calls == [1]


async def test_the_learner_refuses_a_group_served_by_another_adapter_than_its_versions(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        await store.adapters.save("policy", 1, "policy-v1", "/a/v1", loaded=True, digest="a" * 64)
        rollouts = []
        for k, digest in enumerate(("a" * 64, "b" * 64)):
            identity = await store.create_rollout("proof", "t", group_size=2)
            call = call_record(identity.rollout_id, policy_version=1, engine_model="policy-v1", adapter_digest=digest)
            await store.insert_calls([call])
            await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": float(k)})
            rollouts.append(identity.rollout_id)
        group_id = (await store.get_rollout(rollouts[0]))[0].group_id
        group = await load_group(store, group_id)
        with pytest.raises(UnusableGroup, match="not the one published as v1"):
            check_group(group, temperature=1.0)
    finally:
        await store.close()


async def test_an_engine_back_from_a_failure_serves_again_only_once_it_applies_the_adapters(sqlite_db, tmp_path):
    fakes = fake_engines(2)
    async with pool_gateway(sqlite_db, fakes, adapter_probe_tolerance=TOLERANCE) as gateway:
        response = await gateway.http.post(
            "/admin/adapters", json={"version": 1, "path": str(adapter_folder(tmp_path, 1)), "probe": fake_probe()}
        )
        assert response.status_code == 200 and len(response.json()["proof"]) == 2  # one answer per engine
        rollouts = [await gateway.new_rollout(task=f"t{i}") for i in range(2)]  # one on each engine
        for rollout in rollouts:
            assert (await gateway.chat(rollout)).status_code == 200
        gateway.servers[1].stop()  # the engine dies; its rollout moves to the other one
        for rollout in rollouts:
            assert (await gateway.chat(rollout, "again")).status_code == 200
        await until(lambda: not gateway.pool.members[1].healthy, "engine 1 taken out")

        fresh = fake_engines(1, ignore_loads=True)[0]  # back, but it drops the adapter it is given
        gateway.restart_engine(1, fresh)
        await until(lambda: any(body.get("return_tokens_as_token_ids") for body in fresh.requests), "the probe sent")
        assert not gateway.pool.members[1].healthy  # loaded, not applied: kept out
        fresh.ignore_loads = False
        await until(lambda: gateway.pool.members[1].healthy, "engine 1 back in the pool")
        assert fresh.adapters == {"policy-v1": str(tmp_path / "policy-v1")}
