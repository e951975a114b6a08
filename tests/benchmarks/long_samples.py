"""Long agent samples on the learner: peak memory and time of one optimizer step, and tree packing of a
group's shared prefix against flat packing.

1. ``lengths``: one learner step (``learner.trainer.build_trainer`` + ``train_batch``'s path:
   ``pack_samples`` then ``train_step``; SmolLM2-135M, float32, the default LoRA, CPU) on ONE sample of
   L tokens, the last quarter sampled (an agent's trajectory is mostly prompt and tool output). Each
   length runs in its own process: peak RSS is the process's ``ru_maxrss``, the step time the wall
   time of ``train_step`` and its CPU time (user + system, all threads: less sensitive than wall time
   to other work on a shared machine).
2. ``group``: G samples sharing a P-token prefix, each with its own C-token continuation (sampled):
   one step with tree packing (the prefix forwarded once) and one with flat packing (every sample
   whole), each in its own process; forwarded tokens, rows, peak RSS and step time side by side.

Old log-probs are the model's own (computed once per process before the timed step, with the same
path), so ratios are 1 and every sampled token is trained.

Run: ``.venv/bin/python tests/benchmarks/long_samples.py [--model DIR] [--lengths 2048,4096,...]
[--group 8 --prefix 8192 --continuation 1024] [--skip-lengths] [--skip-group] [--out FILE]``.
Writes JSON to tests/benchmarks/results/long_samples.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import numpy as np
import torch

from learner.config import LearnerConfig
from learner.forward import packed_mode
from learner.packing import pack_samples
from learner.step import row_logprobs, train_step
from learner.trainer import build_trainer
from store.samples import Sample

DEFAULT_OUT = Path(__file__).parent / "results" / "long_samples.json"
LENGTHS = (2048, 4096, 8192, 16384, 32768)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sample(ids: np.ndarray, sampled_from: int) -> Sample:
    mask = np.zeros(len(ids), np.int8)
    mask[sampled_from:] = 1
    return Sample(
        (0,), ids.astype(np.int32), mask, np.zeros(len(ids), np.float32), np.where(mask == 1, 0, -1).astype(np.int32)
    )


def with_own_logprobs(trainer, samples: list[Sample], config: LearnerConfig, tree: bool) -> list[Sample]:
    """Old log-probs = the model's own (no gradient), so every ratio is 1."""
    packing = pack_samples(samples, [0.0] * len(samples), config.batch.token_budget, tree=tree)
    with torch.no_grad(), packed_mode(trainer.model):
        for row in packing.rows:
            new, _ = row_logprobs(trainer.model, row, config.step())
            for k, i in enumerate(row.sample_indices):
                mine = row.target_samples == k
                samples[i].old_logprobs[row.target_offsets[mine].numpy()] = new[mine].float().numpy()
    return samples


def one_step(model_dir: str, samples: list[Sample], advantages: list[float], budget: int, tree: bool) -> dict:
    config = LearnerConfig(model_dir=model_dir, batch={"token_budget": budget, "tree_packing": tree})
    trainer = build_trainer(config)
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0
    samples = with_own_logprobs(trainer, samples, config, tree)
    packing = pack_samples(samples, advantages, budget, tree=tree)
    started, started_cpu = time.perf_counter(), time.process_time()
    metrics = train_step(trainer.model, trainer.optimizer, list(packing.rows), config.step())
    return {
        "step_s": round(time.perf_counter() - started, 2),
        "step_cpu_s": round(time.process_time() - started_cpu, 2),
        "peak_rss_mb": round(rss_mb()),
        "tokens_forwarded": metrics["tokens"],
        "tokens_trained": metrics["tokens_trained"],
        "rows": metrics["rows"],
        "tree": tree,
        "refused": len(packing.refused),
        "ratio_max": metrics["ratio_max"],
        "threads": torch.get_num_threads(),
    }


def child_length(model_dir: str, length: int) -> dict:
    ids = np.random.default_rng(length).integers(0, 49152, length)
    result = one_step(model_dir, [sample(ids, length * 3 // 4)], [1.0], length, tree=True)
    return {"length": length, **result}


def child_group(model_dir: str, g: int, prefix: int, continuation: int, tree: bool, rows: int = 0) -> dict:
    """``rows`` (flat only, 0 = all G): train only that many of the G samples and scale the step's time
    by G / rows. Flat rows are independent and of one shape (the prefix and one continuation each), so a
    flat step costs G times one row; measuring one row keeps the comparison affordable on 2 cores."""
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 49152, prefix)
    samples = [sample(np.concatenate([shared, rng.integers(0, 49152, continuation)]), prefix) for _ in range(g)]
    advantages = [float(a) for a in np.linspace(-1.0, 1.0, g)]
    measured = g if tree or not rows else min(rows, g)
    budget = max(g * continuation + prefix, prefix + continuation)
    result = one_step(model_dir, samples[:measured], advantages[:measured], budget, tree)
    if measured < g:
        scale = g / measured
        result = {
            **result,
            "rows_measured": measured,
            "step_s": round(result["step_s"] * scale, 2),
            "step_cpu_s": round(result["step_cpu_s"] * scale, 2),
            "tokens_forwarded": round(result["tokens_forwarded"] * scale),
            "tokens_trained": round(result["tokens_trained"] * scale),
            "rows": g,
        }
    return {"group": g, "prefix": prefix, "continuation": continuation, **result}


def run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": out.stderr[-1500:], "returncode": out.returncode, "args": args}
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(report: dict) -> str:
    lines = ["| L | peak RSS | step time | step CPU |", "|---|---|---|---|"]
    for r in report.get("lengths", []):
        lines.append(
            f"| {r.get('length', '?'):,} | {r['peak_rss_mb'] / 1024:.2f} GB | {r['step_s']:.0f} s | {_cpu(r)} |"
            if "error" not in r
            else f"| {r['args'][2]} | failed (rc {r['returncode']}) | – | – |"
        )
    group = report.get("group", {})
    if group:
        lines += [
            "",
            "| packing | forwarded tokens | rows | peak RSS | step time | step CPU |",
            "|---|---|---|---|---|---|",
        ]
        for name in ("tree", "flat"):
            r = group.get(name)
            if r and "error" not in r:
                lines.append(
                    f"| {name} | {r['tokens_forwarded']:,} | {r['rows']} | {r['peak_rss_mb'] / 1024:.2f} GB "
                    f"| {r['step_s']:.0f} s | {_cpu(r)} |"
                )
        if "speedup" in group:
            lines.append(f"\ntree speed-up: x{group['speedup']:.2f} wall, x{group.get('speedup_cpu', 0):.2f} CPU")
    return "\n".join(lines)


def _cpu(result: dict) -> str:
    return f"{result['step_cpu_s']:.0f} s" if "step_cpu_s" in result else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="HF folder (default: harnessrl's prepared SmolLM2)")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prefix", type=int, default=8192)
    parser.add_argument("--continuation", type=int, default=1024)
    parser.add_argument("--skip-lengths", action="store_true")
    parser.add_argument("--skip-group", action="store_true")
    parser.add_argument("--packings", default="tree,flat", help="which group packings to measure (tree, flat or both)")
    parser.add_argument(
        "--flat-rows", type=int, default=0, help="measure this many flat rows and scale to G (0: all G)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model_dir, *rest = args.child
        result = (
            child_length(model_dir, int(rest[0]))
            if kind == "length"
            else child_group(model_dir, int(rest[0]), int(rest[1]), int(rest[2]), rest[3] == "tree", int(rest[4]))
        )
        print(json.dumps(result))
        return
    if not args.model:
        from harnessrl.engine.model_prep import prepare_smollm2

        args.model = str(prepare_smollm2())
    report: dict = {"model": args.model, "cpus": torch.get_num_threads(), "device": "cpu", "dtype": "float32"}
    if not args.skip_lengths:
        report["lengths"] = []
        for length in (int(x) for x in args.lengths.split(",")):
            report["lengths"].append(run_child(["length", args.model, str(length)]))
            print(json.dumps(report["lengths"][-1]), flush=True)
    if not args.skip_group:
        report["group"] = {}
        for name in args.packings.split(","):
            report["group"][name] = run_child(
                [
                    "group",
                    args.model,
                    str(args.group),
                    str(args.prefix),
                    str(args.continuation),
                    name,
                    str(args.flat_rows),
                ]
            )
            print(json.dumps(report["group"][name]), flush=True)
    if args.out.exists():  # keep what an earlier partial run measured
        earlier = json.loads(args.out.read_text())
        report = {**earlier, **report, "group": {**earlier.get("group", {}), **report.get("group", {})}}
    tree, flat = report.get("group", {}).get("tree", {}), report.get("group", {}).get("flat", {})
    if tree and flat and "error" not in tree and "error" not in flat:
        report["group"]["speedup"] = round(flat["step_s"] / tree["step_s"], 2)
        report["group"]["speedup_cpu"] = round(flat["step_cpu_s"] / tree["step_cpu_s"], 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))


if __name__ == "__main__":
    main()
