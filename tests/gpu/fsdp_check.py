"""The learner's steps with its base sharded by FSDP2 over every GPU of the machine (NCCL), in float32,
against the same steps with the whole base on each rank (data parallelism: the same sums, so within
1e-6) and on one GPU alone (within 1e-4: the gradients are summed in another order, and AdamW's first
steps, about lr * sign(g), amplify that; on CPU this batch gives 2.3e-5 for either parallelism). With one
GPU the sharded run is FSDP2 over one rank (its hooks, DTensors and activation checkpointing on CUDA, no
communication; 0.0 on CPU); the arithmetic across ranks is proven on CPU by
tests/integration/test_learner_fsdp.py. Prints one JSON line (check "fsdp_step"); exits 1 if it fails.
Run by tests/gpu/check.sh; without a GPU it runs on the CPU (gloo) as a dry run.

Usage: python tests/gpu/fsdp_check.py MODEL_DIR [--max-ranks 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SAME_SUMS = 1e-6  # sharded vs data-parallel on as many ranks
REORDERED = 1e-4  # sharded vs one rank
STEPS = 2


def batch(model, vocab: int, n: int = 10) -> list:
    """Packed rows of ``n`` samples (200..1500 tokens, rows of up to 2048: layers of the longer ones are
    recomputed in the backward); old log-probs = the model's own + noise, so ratios spread and clip."""
    from learner.loss import token_logprobs
    from learner.packing import pack_samples
    from store.samples import Sample

    rng = np.random.default_rng(0)
    device = model.get_input_embeddings().weight.device  # whole on every rank (learner.sharding)
    samples, advantages = [], []
    for _ in range(n):
        length = int(rng.integers(200, 1501))
        ids = rng.integers(0, vocab, length)
        mask = np.zeros(length, np.int8)
        mask[length // 2 :] = 1
        with torch.no_grad():  # every rank forwards the same samples: the sharded layers gather in step
            ids_t = torch.from_numpy(ids)[None].to(device)
            own = token_logprobs(model(input_ids=ids_t).logits, ids_t)[0].float().cpu().numpy()
        old = np.where(mask == 1, own + rng.normal(0.0, 0.3, length), 0).astype(np.float32)
        samples.append(Sample((0,), ids.astype(np.int32), mask, old, np.where(mask == 1, 0, -1).astype(np.int32)))
        advantages.append(float(rng.normal()))
    return list(pack_samples(samples, advantages, 2048).rows)


def worker(model_dir: str, out: Path, sharded: bool) -> None:
    """One rank (under torchrun): build the learner's model, shard it or not, take the steps, save."""
    import torch.distributed as dist

    from learner.config import LearnerConfig, ParallelSettings
    from learner.ddp_check import lora_weights, run_steps
    from learner.distributed import shard, world
    from learner.sharding import frozen_numel, is_sharded, shard_base
    from learner.trainer import build_trainer

    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")  # cpu: a dry run
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")  # also for one rank: FSDP2 needs one
    parallel = ParallelSettings(shard="fsdp" if sharded else "none")
    config = LearnerConfig(model_dir=model_dir, dtype="float32", device=str(device), parallel=parallel)
    model = build_trainer(config).model  # sharded there under 2+ ranks, as `harnessrl train` does
    if sharded and not is_sharded(model):  # one rank: FSDP2 over it alone
        shard_base(model, device)
    rows = batch(model, model.get_input_embeddings().weight.shape[0])
    rank, size = world()
    mine = shard(rows, [row.num_tokens for row in rows], rank, size)
    metrics = run_steps(model, mine, STEPS, batch=rows)
    if rank == 0:
        weights = {k: v.cpu() for k, v in lora_weights(model).items()}
        torch.save({"weights": weights, "metrics": metrics, "base_numel": frozen_numel(model)}, out)
    dist.barrier()
    dist.destroy_process_group()


def launch(model_dir: str, out: Path, ranks: int, sharded: bool) -> str:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
    command += [__file__, model_dir, "--worker", str(out)] + (["--sharded"] if sharded else [])
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    return "" if done.returncode == 0 else (done.stdout + done.stderr)[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--max-ranks", type=int, default=8)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sharded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.model_dir, args.worker, args.sharded)
        return 0
    ranks = max(1, min(args.max_ranks, torch.cuda.device_count() or args.max_ranks))  # no GPU: a dry run
    with tempfile.TemporaryDirectory() as folder:
        runs = {"one_rank": (1, False), "data_parallel": (ranks, False), "sharded": (ranks, True)}
        if ranks == 1:
            del runs["data_parallel"]  # the same run as one_rank
        for name, (n, sharded) in runs.items():
            if error := launch(args.model_dir, Path(folder) / f"{name}.pt", n, sharded):
                print(json.dumps({"check": "fsdp_step", "ok": False, "ranks": ranks, name: error}), flush=True)
                return 1
        got = {name: torch.load(Path(folder) / f"{name}.pt") for name in runs}
    diffs = {f"vs_{name}": lora_diff(got["sharded"], got[name]) for name in runs if name != "sharded"}
    limits = {"vs_one_rank": REORDERED, "vs_data_parallel": SAME_SUMS}
    ok = all(diff <= limits[name] for name, diff in diffs.items())
    ok = ok and all(m["optimizer_stepped"] for m in got["sharded"]["metrics"])
    held, whole = got["sharded"]["base_numel"]
    line = {"check": "fsdp_step", "ok": ok, "ranks": ranks, "max_abs_lora_diff": diffs, "tolerance": limits}
    print(json.dumps({**line, "base_held_fraction": round(held / whole, 3)}), flush=True)
    return 0 if ok else 1


def lora_diff(got: dict, want: dict) -> float:
    if got["weights"].keys() != want["weights"].keys():
        return float("inf")
    return max(float((got["weights"][k] - v).abs().max()) for k, v in want["weights"].items())


if __name__ == "__main__":
    sys.exit(main())
