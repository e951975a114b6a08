"""Per-token train/inference mismatch: each trained call's learner - sampler log-prob per sampled
token, kept by the store and shown on the call; equal to an offline recomputation, through tree
packing (a shared turn forwarded once) and through the learner's own loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from gateway.api.calls import mismatch_view
from harnessrl.cli.app import app
from learner.metrics import MetricsSink
from learner.mismatch import RowDeltas, call_deltas, call_records
from learner.packing import pack_samples
from learner.prometheus import LearnerExporter
from learner.step import StepConfig, train_step
from store.samples import Sample
from store.store import Store
from tests.builders import call_record, gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.learner_builders import lora_model, own_logprobs
from tests.learner_reads import policy_series
from tests.learner_runs import tiny_learner_config, train_run

RUN = "mismatch"


@pytest.fixture
async def gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    async for harness in start_gateway(gateway_settings(sqlite_db, fake_engine_server.url), fake_engine):
        yield harness


SAMPLER = -4.0  # what the "sampler" said of every token: far from the model, so every Δ is visible


def two_turn_samples(rng: np.random.Generator) -> list[Sample]:
    """One rollout whose first call (id 1) has two continuations (calls 2 and 3): two samples that
    share the first call's prompt and output, as a tree row forwards once."""
    prompt, first = rng.integers(0, 64, 6), rng.integers(0, 64, 3)
    samples = []
    for call_id in (2, 3):
        tool, second = rng.integers(0, 64, 2), rng.integers(0, 64, 4)
        ids = np.concatenate([prompt, first, tool, second]).astype(np.int32)
        mask = np.zeros(len(ids), np.int8)
        mask[6:9] = mask[11:] = 1
        old = np.where(mask == 1, SAMPLER, 0).astype(np.float32)
        versions = np.where(mask == 1, 0, -1).astype(np.int32)
        samples.append(Sample((1, call_id), ids, mask, old, versions, ((6, 9), (11, 15))))
    return samples


def test_each_calls_deltas_are_its_tokens_learner_minus_sampler_log_probs_through_a_prefix_tree():
    model = lora_model(moved=True)
    samples = two_turn_samples(np.random.default_rng(0))
    packing = pack_samples(samples, [1.0, -1.0], token_budget=64, tree=True, min_saved_tokens=1)
    assert len(packing.rows) == 1 and packing.rows[0].num_tokens < sum(len(s.input_ids) for s in samples)
    expected = [own_logprobs(model, s.input_ids) - SAMPLER for s in samples]  # before the step moves it
    deltas: list[RowDeltas] = []
    train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), list(packing.rows), StepConfig(), 0, deltas)

    per_call = call_deltas(deltas, samples)
    assert sorted(per_call) == [1, 2, 3]
    assert per_call[1] == pytest.approx(expected[0][6:9], abs=1e-4)
    assert per_call[2] == pytest.approx(expected[0][11:15], abs=1e-4)
    assert per_call[3] == pytest.approx(expected[1][11:15], abs=1e-4)


def test_tokens_another_version_sampled_are_not_compared():
    model = lora_model()
    [sample, _] = two_turn_samples(np.random.default_rng(1))
    sample.policy_versions[11:] = 1  # the second turn: sampled by a newer version than the learner's 0
    rows = list(pack_samples([sample], [1.0], token_budget=64).rows)
    deltas: list[RowDeltas] = []
    train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), rows, StepConfig(), 0, deltas)
    per_call = call_deltas(deltas, [sample])
    assert np.isfinite(per_call[1]).all() and np.isnan(per_call[2]).all()
    [record] = call_records(per_call, step=1, version=0)  # a call with nothing compared is not kept
    assert record.call_id == 1 and record.tokens == 3
    assert record.mean_abs == pytest.approx(float(np.abs(per_call[1]).mean()))


async def test_the_learner_stores_each_trained_calls_mismatch_as_recomputed_offline(
    sqlite_db, tiny_model_dir, tmp_path
):
    store = Store.from_url(sqlite_db)
    rng = np.random.default_rng(2)
    try:
        calls = []
        for task in ("a", "b"):
            for reward in (0.0, 1.0):
                rollout = (await store.create_rollout(RUN, task, group_size=2)).rollout_id
                prompt, output = rng.integers(10, 1000, 12).tolist(), rng.integers(10, 1000, 6).tolist()
                record = call_record(rollout, prompt_ids=prompt, output_ids=output, output_logprobs=[SAMPLER] * 6)
                [call_id] = await store.insert_calls([record])
                calls.append((call_id, prompt, output))
                await store.end_rollout(rollout, "finished", rewards={"verifier": reward})
        await train_run(tiny_learner_config(tiny_model_dir, tmp_path / "out", max_steps=1), store, RUN)

        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()  # LoRA starts at 0
        for call_id, prompt, output in calls:
            stored = await store.mismatch.of_call(call_id)
            offline = own_logprobs(base, np.array(prompt + output))[len(prompt) :] - SAMPLER
            assert (stored.step, stored.version, stored.tokens) == (1, 0, 6)
            assert stored.deltas == pytest.approx(offline, rel=2e-3, abs=2e-3)  # stored as float16
            view = mismatch_view(stored)
            assert view.mean_abs == pytest.approx(float(np.abs(offline).mean()), rel=1e-3)
            assert len(view.deltas) == len(output)
    finally:
        await store.close()


async def plant_mismatch(store: Store) -> None:
    """pi: two calls of v1 (3 and 1 compared tokens) and one of v2; opencode: one call of v1."""
    planted = (
        ("pi", 1, [0.05, -0.05, 0.3, np.nan]),
        ("pi", 1, [0.5]),
        ("pi", 2, [0.02, 0.02]),
        ("opencode", 1, [-0.2]),
    )
    for harness, version, deltas in planted:
        rollout = (await store.create_rollout("summed", "t", None, {"harness": harness})).rollout_id
        record = call_record(rollout, output_ids=list(range(len(deltas))), output_logprobs=[-1.0] * len(deltas))
        [call_id] = await store.insert_calls([record])
        values = np.asarray(deltas, dtype=np.float32)
        await store.mismatch.save(await store.listings.run_id("summed"), call_records({call_id: values}, 1, version))


async def test_the_run_summary_pools_tokens_per_harness_model_and_version(gateway):
    store = gateway.state.store
    await plant_mismatch(store)
    rows = await store.mismatch.summary(await store.listings.run_id("summed"))
    assert [(r.harness, r.version, r.calls, r.tokens) for r in rows] == [
        ("opencode", 1, 1, 1),
        ("pi", 1, 2, 4),
        ("pi", 2, 1, 2),
    ]
    pi_v1 = rows[1]
    assert pi_v1.mean_abs == pytest.approx((0.05 + 0.05 + 0.3 + 0.5) / 4, rel=1e-3)  # token-weighted, NaN left out
    assert pi_v1.max_abs == pytest.approx(0.5, rel=1e-3) and pi_v1.frac_over == pytest.approx(2 / 4)
    only_v2 = await store.mismatch.summary(await store.listings.run_id("summed"), version=2)
    assert [(r.harness, r.version, r.tokens) for r in only_v2] == [("pi", 2, 2)]
    listed = (await gateway.http.get("/api/runs/summed/mismatch")).json()
    assert [(r["harness"], r["version"], r["tokens"]) for r in listed] == [
        ("opencode", 1, 1),
        ("pi", 1, 4),
        ("pi", 2, 2),
    ]


async def test_the_learner_exports_the_mismatch_of_the_version_it_trained_per_harness_and_model(gateway):
    store = gateway.state.store
    await plant_mismatch(store)
    exporter = LearnerExporter()
    sink = MetricsSink(store, await store.listings.run_id("summed"), None, exporter.policy("policy"))
    await sink.record_mismatch(1)
    series = policy_series(exporter, "policy")
    assert series[("pi", "policy", "1")]["mean_abs"] == pytest.approx((0.05 + 0.05 + 0.3 + 0.5) / 4, rel=1e-3)
    assert series[("opencode", "policy", "1")]["tokens"] == 1
    assert not any(labels[2] == "2" for labels in series)  # v2's calls were not trained by this step


def test_health_prints_the_mismatch_table_once_calls_were_trained(sqlite_db):
    async def planted() -> None:
        store = Store.from_url(sqlite_db)
        try:
            await plant_mismatch(store)
        finally:
            await store.close()

    asyncio.run(planted())
    result = CliRunner().invoke(app, ["health", "--run", "summed", "--database-url", sqlite_db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "train/inference mismatch of run 'summed'" in result.output and "v2" in result.output
