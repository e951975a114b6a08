"""The managed engine on agent-shaped work, for the dtype `serve` picks and the other one, in one run.

Real agents' first prompts are long (pi ~1.5k tokens, OpenCode ~7.7k, Hermes ~11.9k), so a rollout's
cost on a CPU engine is mostly prefill. Each dtype gets a fresh vLLM started with the same flags as
`harnessrl serve` (`harnessrl.engine.process.EngineLaunch`, LoRA on), then:

- cold prefill: a fresh prompt of 2,048 and of 7,600 tokens (never seen, so no prefix-cache hit),
  one output token; the 2k one twice, reporting the second (the first pays lazy initialisation);
- shared prefix: 8 requests with one 1,737-token prefix and their own 32-token suffix, 64 tokens out,
  2 at a time (the shape of G rollouts of one task): wall time and mean latency;
- decode: one stream of 256 tokens after a short prompt, tokens/s after the first token;
- logprob mismatch: 128 tokens sampled at temperature 1 with their logprobs, recomputed by
  transformers in float32 and bfloat16 (the learner's dtypes): mean and max |difference| per token.
  This is the train/inference mismatch that the learner's importance ratios correct.

Run: ``.venv/bin/python tests/benchmarks/engine.py [--model DIR] [--dtypes float32,bfloat16] [--out F]``
(default model: SmolLM2 from ``harnessrl models prepare``). Writes JSON under tests/benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import httpx  # noqa: E402

from harnessrl.engine.hardware import NATIVE_BF16_FLAGS, cpu_flags, machine_dtype  # noqa: E402
from harnessrl.engine.process import EngineLaunch, ManagedProcess  # noqa: E402
from harnessrl.server import free_port  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TEXT = (
    "You are a coding agent. Read the task, inspect the repository with the tools you have, "
    "make the smallest change that fixes the failing test, run the tests, and report what you did. "
)


class Probe:
    """Timed requests against one engine's /v1/completions with token-id prompts."""

    def __init__(self, url: str, vocab: int, seed: int):
        self.http = httpx.AsyncClient(base_url=url, timeout=1800.0)
        self.vocab, self.random = vocab, random.Random(seed)

    def fresh(self, n: int) -> list[int]:
        return [self.random.randrange(200, self.vocab) for _ in range(n)]

    async def complete(self, prompt: list[int], max_tokens: int, **extra) -> tuple[float, dict]:
        body = {
            "model": "base",
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            **extra,
        }
        start = time.perf_counter()
        response = await self.http.post("/v1/completions", json=body)
        response.raise_for_status()
        return time.perf_counter() - start, response.json()

    async def cold_prefill(self, n: int) -> float:
        seconds, _ = await self.complete(self.fresh(n), 1)
        return seconds

    async def shared_prefix(
        self, prefix_tokens: int = 1737, requests: int = 8, concurrency: int = 2, out: int = 64
    ) -> dict:
        prefix, gate = self.fresh(prefix_tokens), asyncio.Semaphore(concurrency)

        async def one() -> float:
            async with gate:
                seconds, _ = await self.complete(prefix + self.fresh(32), out)
                return seconds

        start = time.perf_counter()
        latencies = await asyncio.gather(*(one() for _ in range(requests)))
        return {"wall_s": time.perf_counter() - start, "mean_latency_s": statistics.mean(latencies)}

    async def decode(self, out: int = 256) -> float:
        body = {
            "model": "base",
            "prompt": self.fresh(32),
            "max_tokens": out,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
        }
        first = None
        async with self.http.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if first is None and line.startswith("data: {"):
                    first = time.perf_counter()
        return (out - 1) / (time.perf_counter() - first)

    async def sample(self, prompt: list[int], out: int = 128) -> dict:
        _, body = await self.complete(
            prompt, out, temperature=1.0, seed=7, logprobs=0, return_token_ids=True, ignore_eos=False
        )
        choice = body["choices"][0]
        return {"token_ids": choice["token_ids"], "logprobs": choice["logprobs"]["token_logprobs"]}


async def measure(url: str, vocab: int, prompt: list[int], seed: int) -> dict:
    probe = Probe(url, vocab, seed)
    try:
        await probe.complete(probe.fresh(32), 4)  # warm-up
        await probe.cold_prefill(2048)  # lazy initialisation of the long-prompt paths
        return {
            "cold_prefill_2k_s": await probe.cold_prefill(2048),
            "cold_prefill_8k_s": await probe.cold_prefill(7600),
            "shared_prefix": await probe.shared_prefix(),
            "decode_tok_s": await probe.decode(),
            "sample": await probe.sample(prompt),
        }
    finally:
        await probe.http.aclose()


def engine_run(model_dir: Path, dtype: str, env: dict[str, str], vocab: int, prompt: list[int], logs: Path) -> dict:
    extra = tuple(env.pop("ARGS", "").split())  # a variant of vLLM flags rather than of its environment
    launch = EngineLaunch(
        model_dir=model_dir, port=free_port(), max_model_len=8192, dtype=dtype, kv_cache_gib=4, extra_args=extra
    )
    engine = ManagedProcess.vllm(launch, logs / f"engine-{dtype}-{len(env)}-{len(extra)}.log")
    engine.env = {**engine.env, **env}
    with engine:
        engine.wait_healthy()
        return asyncio.run(measure(engine.url, vocab, prompt, seed=1))


def configurations(
    dtypes: list[str], env_variants: list[str], reverse: bool = False
) -> list[tuple[str, str, dict[str, str]]]:
    """(label, dtype, extra engine env): each dtype as `serve` starts it, then the first dtype with
    each ``KEY=VALUE[,KEY=VALUE]`` variant (e.g. thread binding) to compare against it; ``reverse``
    runs them in the opposite order (run both orders on a busy machine: load drifts)."""
    configs = [(dtype, dtype, {}) for dtype in dtypes]
    for variant in env_variants:
        env = dict(item.split("=", 1) for item in variant.split(","))
        configs.append((f"{dtypes[0]}+{variant}", dtypes[0], env))
    return configs[::-1] if reverse else configs


def mismatch(model_dir: Path, prompt: list[int], sample: dict, learner_dtype: str) -> dict:
    """|engine logprob - learner logprob| over the sampled tokens, the learner in ``learner_dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, learner_dtype)).eval()
    ids = torch.tensor([prompt + sample["token_ids"]])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    ours = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    diff = (ours - torch.tensor(sample["logprobs"])).abs()
    return {"mean_abs": float(diff.mean()), "max_abs": float(diff.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--dtypes", default=None, help="comma-separated; default: the chosen one and the other")
    parser.add_argument("--out", type=Path, default=RESULTS / "engine.json")
    parser.add_argument("--reverse", action="store_true", help="run the configurations in reverse order")
    parser.add_argument(
        "--env-variant",
        action="append",
        default=[],
        help="KEY=VALUE[,KEY=VALUE]: also run the first dtype with this engine environment "
        "(ARGS='--flag value' for vLLM flags)",
    )
    args = parser.parse_args()
    if args.model is None:
        from harnessrl.engine.model_prep import prepare_smollm2

        args.model = prepare_smollm2()
    from transformers import AutoTokenizer

    choice = machine_dtype()
    other = "bfloat16" if choice.dtype == "float32" else "float32"
    dtypes = args.dtypes.split(",") if args.dtypes else [choice.dtype, other]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompt = tokenizer.encode(TEXT * 4)
    results = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "native_bf16_flags": sorted(cpu_flags() & NATIVE_BF16_FLAGS),
            "chosen": choice.dtype,
            "reason": choice.reason,
        },
        "dtypes": {},
    }
    with tempfile.TemporaryDirectory() as logs:
        for label, dtype, env in configurations(dtypes, args.env_variant, args.reverse):
            run = engine_run(args.model, dtype, env, len(tokenizer), prompt, Path(logs))
            run["logprob_mismatch"] = {
                learner: mismatch(args.model, prompt, run["sample"], learner) for learner in ("float32", "bfloat16")
            }
            del run["sample"]
            results["dtypes"][label] = run
            print(label, json.dumps(run), flush=True)
    if len(dtypes) == 2:
        a, b = (results["dtypes"][d] for d in dtypes)
        results["ratio_other_over_chosen"] = {
            "cold_prefill_2k": b["cold_prefill_2k_s"] / a["cold_prefill_2k_s"],
            "cold_prefill_8k": b["cold_prefill_8k_s"] / a["cold_prefill_8k_s"],
            "shared_prefix_wall": b["shared_prefix"]["wall_s"] / a["shared_prefix"]["wall_s"],
            "decode_tok_s": a["decode_tok_s"] / b["decode_tok_s"],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
