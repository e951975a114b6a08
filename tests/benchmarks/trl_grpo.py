"""One GRPO optimizer step on a real agent's group: harnessrl's learner beside TRL's ``GRPOTrainer``.

The same samples (a group of pi rollouts a ``quickstart --harness pi`` run recorded: every call's exact ids
and the sampler's log-probs), the same model, the same LoRA (r16, alpha 32, every linear layer), the same
AdamW, one step each, fp32 on the CPU. Measured per mode, each in its own process (so peak memory is that
mode's own), modes alternating repeat after repeat so load from other processes hits them alike:

- ``tree``: the learner's path: ``learner.packing.pack_samples`` (prefix trees: pi's ~1.4k-token system
  prompt and each shared turn forwarded once) and ``learner.step.train_step``;
- ``flat``: the same learner with ``tree=False`` (each sample forwarded whole, no padding);
- ``trl``: TRL's own loss (``GRPOTrainer.compute_loss``, loss_type "grpo", beta 0, gradient checkpointing
  on as its ``train()`` turns it on) on the batch TRL builds for a multi-turn tool rollout: the first
  call's prompt left-padded, the rest as the completion right-padded, ``tool_mask`` zeroing what no call
  sampled (tool results, re-sent history).

Both learners start from the base model's LoRA (zero update), so the samples' sampler log-probs (taken
under later adapters) differ from theirs: the learner's ratio mask leaves some sampled tokens out of its
loss (``tokens_trained``); every mode still forwards and back-propagates every token.

Reported: median step seconds, peak resident memory (ru_maxrss), tokens forwarded and trained, the speed
ratios (trl / tree) and, per forwarded token, the tree row's cost over a flat row's.

Run: ``.venv/bin/python tests/benchmarks/trl_grpo.py --database sqlite+aiosqlite:///HOME/harnessrl.db
--run demo-pi`` (HOME: the quickstart's HARNESSRL_HOME), ``--repeats 3``. TRL is a dev extra (benchmark
only). Figures go to ``tests/benchmarks/results/trl_grpo.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import numpy as np  # noqa: E402
import torch  # noqa: E402

from learner.config import LearnerConfig  # noqa: E402
from store.samples import Sample, build_samples  # noqa: E402
from store.store import Store  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "trl_grpo.json"
MODES = ("tree", "flat", "trl")


# --- the group ---------------------------------------------------------------------------------------


async def read_group(database: str, run: str, size: int) -> tuple[list[Sample], list[float]]:
    """The run's group of ``size`` rollouts with the most model calls, one sample per root-to-leaf path,
    and their group-normalised rewards (+1/-1 alternating if every reward is equal: speed is measured)."""
    store = Store.from_url(database)
    try:
        groups: dict[str, list] = {}
        after = 0
        while page := await store.listings.run_rollouts(run, after, 500):
            for rollout, group in page:
                after = rollout.id
                groups.setdefault(group, []).append(rollout)
        if not groups:
            raise SystemExit(f"run {run!r} has no rollouts in {database}: give a quickstart run's --database and --run")
        best, best_calls = None, -1
        for members in groups.values():
            if len(members) < size:
                continue
            calls = [await store.calls.nodes(r.id) for r in members[:size]]
            if sum(len(c) for c in calls) > best_calls:
                best, best_calls = (members[:size], calls), sum(len(c) for c in calls)
        if best is None:
            raise SystemExit(f"no group of {size} rollouts in run {run!r}: lower --group-size")
        rollouts, nodes = best
        samples, rewards = [], []
        for rollout, calls in zip(rollouts, nodes, strict=True):
            for sample in build_samples(calls):
                if not np.isfinite(sample.old_logprobs).all():
                    raise SystemExit(f"rollout {rollout.id} has calls without sampler log-probs (a teacher run)")
                samples.append(sample)
                rewards.append(float(rollout.reward or 0.0))
        return samples, advantages_of(rewards)
    finally:
        await store.close()


def advantages_of(rewards: list[float]) -> list[float]:
    spread = float(np.std(rewards))
    if spread == 0.0:
        return [1.0 if i % 2 == 0 else -1.0 for i in range(len(rewards))]
    mean = float(np.mean(rewards))
    return [(r - mean) / spread for r in rewards]


# --- one step each way (each in its own process) -----------------------------------------------------


def learner_steps(
    model_dir: str, samples, advantages, token_budget: int, tree: bool, repeats: int, warmup: bool = True
) -> dict:
    from learner.loss import LossConfig
    from learner.packing import pack_samples
    from learner.step import StepConfig, train_step
    from learner.trainer import build_trainer

    trainer = build_trainer(LearnerConfig(model_dir=model_dir))
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0  # every repeat steps the same weights
    config = StepConfig(loss=LossConfig())
    times, metrics = [], {}
    for repeat in range(repeats + warmup):  # a warm-up step (allocator, kernels) is not timed
        started = time.perf_counter()
        rows = list(pack_samples(samples, advantages, token_budget, tree=tree).rows)
        metrics = train_step(trainer.model, trainer.optimizer, rows, config)
        if repeat or not warmup:
            times.append(time.perf_counter() - started)
    return {
        "step_s": times,
        "tokens_forwarded": int(metrics["tokens"]),
        "tokens_trained": int(metrics["tokens_trained"]),
        "rows": len(rows),
    }


def trl_batch(samples, advantages) -> dict:
    """TRL's multi-turn batch: prompt = up to the first sampled token (left-padded), completion = the rest
    (right-padded), ``tool_mask`` 0 where no call sampled the token."""
    starts = [int(np.argmax(s.loss_mask)) for s in samples]
    prompts = [s.input_ids[:k] for s, k in zip(samples, starts, strict=True)]
    completions = [s.input_ids[k:] for s, k in zip(samples, starts, strict=True)]
    p_len, c_len, n = max(map(len, prompts)), max(map(len, completions)), len(samples)
    batch = {
        "prompt_ids": torch.zeros(n, p_len, dtype=torch.long),
        "prompt_mask": torch.zeros(n, p_len, dtype=torch.long),
        "completion_ids": torch.zeros(n, c_len, dtype=torch.long),
        "completion_mask": torch.zeros(n, c_len, dtype=torch.long),
        "tool_mask": torch.zeros(n, c_len, dtype=torch.long),
        "old_per_token_logps": torch.zeros(n, c_len),
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "num_items_in_batch": torch.tensor(float(sum(int(s.loss_mask.sum()) for s in samples))),
    }
    for i, (s, k, prompt, completion) in enumerate(zip(samples, starts, prompts, completions, strict=True)):
        batch["prompt_ids"][i, p_len - len(prompt) :] = torch.from_numpy(prompt.astype(np.int64))
        batch["prompt_mask"][i, p_len - len(prompt) :] = 1
        batch["completion_ids"][i, : len(completion)] = torch.from_numpy(completion.astype(np.int64))
        batch["completion_mask"][i, : len(completion)] = 1
        batch["tool_mask"][i, : len(completion)] = torch.from_numpy(s.loss_mask[k:].astype(np.int64))
        batch["old_per_token_logps"][i, : len(completion)] = torch.from_numpy(s.old_logprobs[k:])
    return batch


def trl_steps(model_dir: str, samples, advantages, repeats: int) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    lora = LearnerConfig(model_dir=model_dir).lora
    n = len(samples)
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=n,
            num_generations=n,
            gradient_accumulation_steps=1,
            loss_type="grpo",
            beta=0.0,
            learning_rate=0.0,
            report_to=[],
        )
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
            processing_class=AutoTokenizer.from_pretrained(model_dir),
            reward_funcs=lambda completions, **kw: [0.0] * len(completions),
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["x"] * n}),
            peft_config=LoraConfig(
                r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.targets)
            ),
        )
        model = trainer.model
        model.train()
        if args.gradient_checkpointing:  # as Trainer.train() does before its first step (TRL's default: on)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
            model.enable_input_require_grads()
        trainer.current_gradient_accumulation_steps = 1
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=0.0)
        batch = trl_batch(samples, advantages)
        times = []
        for repeat in range(repeats + 1):
            started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            trainer.compute_loss(model, batch).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            if repeat:
                times.append(time.perf_counter() - started)
    return {
        "step_s": times,
        "tokens_forwarded": int(batch["prompt_ids"].numel() + batch["completion_ids"].numel()),
        "tokens_trained": int(batch["tool_mask"].sum()),
        "rows": 1,
    }


def one_mode(spec_path: Path, mode: str) -> None:
    """The child process: one mode's steps, printed as one JSON line with its peak memory."""
    spec = pickle.loads(spec_path.read_bytes())
    if mode == "trl":
        result = trl_steps(spec["model"], spec["samples"], spec["advantages"], spec["repeats"])
    else:
        result = learner_steps(
            spec["model"], spec["samples"], spec["advantages"], spec["token_budget"], mode == "tree", spec["repeats"]
        )
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


# --- the comparison -----------------------------------------------------------------------------------


def run_mode(spec_path: Path, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(spec_path), "--mode", mode], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"mode {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(spec: dict, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.pkl"
        spec_path.write_bytes(pickle.dumps(spec))
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for _ in range(rounds):  # alternating: load from elsewhere hits every mode alike
            for mode in MODES:
                runs[mode].append(run_mode(spec_path, mode))
    modes = {}
    for mode, results in runs.items():
        step_s = statistics.median(t for r in results for t in r["step_s"])
        modes[mode] = {
            **{k: results[-1][k] for k in ("tokens_forwarded", "tokens_trained", "rows")},
            "step_s": round(step_s, 3),
            "step_s_all": [round(t, 3) for r in results for t in r["step_s"]],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
            "s_per_1k_forwarded": round(1000 * step_s / results[-1]["tokens_forwarded"], 4),
        }
    samples = spec["samples"]
    return {
        "samples": len(samples),
        "turns": [s.num_turns for s in samples],
        "sample_tokens": [len(s.input_ids) for s in samples],
        "token_budget": spec["token_budget"],
        "torch_threads": torch.get_num_threads(),
        "modes": modes,
        "trl_over_tree_step_time": round(modes["trl"]["step_s"] / modes["tree"]["step_s"], 2),
        "trl_over_tree_peak_rss": round(modes["trl"]["peak_rss_mib"] / modes["tree"]["peak_rss_mib"], 2),
        "tree_over_flat_per_forwarded_token": round(
            modes["tree"]["s_per_1k_forwarded"] / modes["flat"]["s_per_1k_forwarded"], 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", help="the quickstart run's store (sqlite+aiosqlite:///HOME/harnessrl.db)")
    parser.add_argument("--run", default="demo-pi")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--model", help="model folder [default: the embedded SmolLM2 (harnessrl models prepare)]")
    parser.add_argument("--token-budget", type=int, default=8192, help="the learner's tokens per packed row")
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per process (after one warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per mode, alternating")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return one_mode(args.child, args.mode)
    if not args.database:
        parser.error("--database is required: the store of a `harnessrl quickstart --harness pi` run")
    if args.model is None:
        from harnessrl.engine.model_prep import prepare_smollm2

        args.model = str(prepare_smollm2())
    samples, advantages = asyncio.run(read_group(args.database, args.run, args.group_size))
    spec = {
        "model": args.model,
        "samples": samples,
        "advantages": advantages,
        "token_budget": args.token_budget,
        "repeats": args.repeats,
    }
    report = {"run": args.run, "model": args.model, **compare(spec, args.rounds)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
