"""The learner on one GPU, offline: a bf16 step, packed and tree rows against per-sample log-probs, and the
peak memory of one step at 8k and 32k tokens. Prints one JSON line per check and a summary line; exits 1
if a check fails. Run by tests/gpu/check.sh (which says what the machine needs).

Usage: python tests/gpu/check.py MODEL_DIR [--lengths 8192,32768]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from learner.attention import resolve_kernel
from learner.config import LearnerConfig
from learner.forward import packed_mode
from learner.loss import token_logprobs
from learner.packing import pack_samples
from learner.step import row_logprobs, train_step
from learner.trainer import build_trainer
from store.samples import Sample

BF16_TOLERANCE = 0.05  # nats: bf16 packed vs per-sample forward (different kernels and reductions)


def emit(**fields) -> dict:
    print(json.dumps(fields), flush=True)
    return fields


def sample(ids: np.ndarray, sampled_from: int, old: np.ndarray | None = None) -> Sample:
    mask = np.zeros(len(ids), np.int8)
    mask[sampled_from:] = 1
    old = np.zeros(len(ids), np.float32) if old is None else old.astype(np.float32)
    return Sample(
        (0,),
        ids.astype(np.int32),
        mask,
        np.where(mask == 1, old, 0).astype(np.float32),
        np.where(mask == 1, 0, -1).astype(np.int32),
    )


def alone_logprobs(model, ids: np.ndarray) -> np.ndarray:
    """Per-sample reference: the plain transformers forward (sdpa, full logits) of one sample."""
    with torch.no_grad():
        ids_t = torch.from_numpy(ids.astype(np.int64))[None].to(next(model.parameters()).device)
        return token_logprobs(model(input_ids=ids_t).logits, ids_t)[0].float().cpu().numpy()


def check_rows(trainer, config: LearnerConfig, vocab: int) -> dict:
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, vocab, 1500)
    samples = [sample(np.concatenate([prompt, rng.integers(0, vocab, n)]), 1400) for n in (300, 500, 200, 400)]
    samples += [sample(rng.integers(0, vocab, n), n // 2) for n in (700, 900)]  # unrelated: flat
    want = [alone_logprobs(trainer.model, s.input_ids) for s in samples]
    worst = {"tree": 0.0, "flat": 0.0}
    for tree in (True, False):
        packing = pack_samples(samples, [0.0] * len(samples), 8192, tree=tree)
        with torch.no_grad(), packed_mode(trainer.model):
            for row in packing.rows:
                new, _ = row_logprobs(trainer.model, row, config.step())
                new = new.float().cpu().numpy()
                for k, i in enumerate(row.sample_indices):
                    mine = (row.target_samples == k).numpy()
                    diff = np.abs(new[mine] - want[i][row.target_offsets[mine].numpy()]).max()
                    worst["tree" if tree else "flat"] = max(worst["tree" if tree else "flat"], float(diff))
    ok = max(worst.values()) < BF16_TOLERANCE
    return emit(check="packed_vs_per_sample", ok=ok, max_abs_logprob_diff=worst, tolerance=BF16_TOLERANCE)


def check_step(trainer, config: LearnerConfig, vocab: int) -> dict:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, vocab, 2048)
    old = alone_logprobs(trainer.model, ids)
    rows = list(pack_samples([sample(ids, 1024, old)], [1.0], 4096).rows)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    metrics = train_step(trainer.model, trainer.optimizer, rows, config.step())
    moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if p.requires_grad)
    ok = bool(metrics["optimizer_stepped"] and moved and abs(metrics["ratio_mean"] - 1.0) < 0.05)
    return emit(
        check="bf16_step",
        ok=ok,
        ratio_mean=metrics["ratio_mean"],
        grad_norm=metrics["grad_norm"],
        loss=metrics["loss"],
        lora_dtype=str(next(iter(before.values())).dtype),
    )


def check_memory(trainer, config: LearnerConfig, vocab: int, length: int) -> dict:
    ids = np.random.default_rng(length).integers(0, vocab, length)
    rows = list(pack_samples([sample(ids, length * 3 // 4)], [1.0], length).rows)
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    started = time.perf_counter()
    train_step(trainer.model, trainer.optimizer, rows, config.step())
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    return emit(
        check="peak_memory",
        length=length,
        ok=True,
        step_s=round(time.perf_counter() - started, 2),
        peak_step_gib=round(peak / 2**30, 3),
        per_token_kib=round(peak / length / 1024, 1),
    )


def check_parking(trainer, config: LearnerConfig, vocab: int) -> dict:
    """An idle policy's moments in host memory (learner.parking): the accelerator's memory drops by their
    size, and a step after they come back equals a step of a copy whose moments never left."""
    import copy

    from learner.parking import moments, park, unpark

    rows = list(pack_samples([sample(np.random.default_rng(2).integers(0, vocab, 512), 256)], [1.0], 512).rows)
    twin_model = copy.deepcopy(trainer.model)
    twin_optimizer = type(trainer.optimizer)(
        [p for p in twin_model.parameters() if p.requires_grad], **trainer.optimizer.defaults
    )
    twin_optimizer.load_state_dict(trainer.optimizer.state_dict())
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    moved = park(trainer.optimizer, trainer.model)
    torch.cuda.synchronize()
    freed = held - torch.cuda.memory_allocated()
    on_host = all(t.device.type == "cpu" and t.is_pinned() for _, _, t in moments(trainer.optimizer))
    unpark(trainer.optimizer, trainer.model)
    train_step(trainer.model, trainer.optimizer, rows, config.step())
    train_step(twin_model, twin_optimizer, rows, config.step())
    trained = [p for p in trainer.model.parameters() if p.requires_grad]
    twin = [p for p in twin_model.parameters() if p.requires_grad]
    diff = max((a - b).abs().max().item() for a, b in zip(trained, twin, strict=True))
    ok = bool(moved > 0 and freed >= moved * 0.9 and on_host and diff <= 1e-6)  # atomics: not bit for bit
    return emit(
        check="park_optimizer",
        ok=ok,
        moved_mib=round(moved / 2**20, 1),
        freed_mib=round(freed / 2**20, 1),
        max_diff=diff,
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--lengths", default="8192,32768")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        emit(check="cuda", ok=False, error="torch sees no CUDA device")
        return 1
    device = torch.device("cuda", 0)
    config = LearnerConfig(model_dir=args.model_dir, batch={"token_budget": 32768})  # dtype auto: bfloat16 on CUDA
    trainer = build_trainer(config)
    vocab = trainer.model.get_input_embeddings().weight.shape[0]
    emit(
        check="setup",
        ok=True,
        gpu=torch.cuda.get_device_name(device),
        torch=torch.__version__,
        dtype=str(next(trainer.model.parameters()).dtype),
        kernel=resolve_kernel(config.forward.kernel, device),
    )
    results = [check_rows(trainer, config, vocab), check_step(trainer, config, vocab)]
    results.append(check_parking(trainer, config, vocab))  # after a step: the optimizer has moments
    memory = [check_memory(trainer, config, vocab, int(n)) for n in args.lengths.split(",")]
    if len(memory) >= 2:
        growth = memory[-1]["peak_step_gib"] / max(memory[0]["peak_step_gib"], 1e-9)
        ratio = memory[-1]["length"] / memory[0]["length"]
        results.append(
            emit(check="memory_linear", ok=growth <= 1.125 * ratio, growth=round(growth, 2), length_ratio=ratio)
        )
    ok = all(r["ok"] for r in results)
    emit(check="summary", ok=ok, failed=[r["check"] for r in results if not r["ok"]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
