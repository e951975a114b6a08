"""A publication's phases on the learner's side against a step, before and after issue 60's cut, in one run.

Each round takes one training step (``tests/benchmarks/learner.py``'s packed step on synthetic samples, the
learner's ``build_trainer`` and AdamW: it moves the adapter, so every checkpoint has new weights), then
writes that step's checkpoint and publication folder both ways, in alternating order:
- ``before``: the code as of commit cb1673a, rebuilt here: the checkpoint's adapter and then the version's
  folder each saved by peft's ``save_pretrained`` (the same weights serialized twice), the digest, the
  probe's two forwards with the output head on all 128 positions;
- ``after``: ``learner.checkpoint.save_checkpoint`` and ``learner.publish.prepare`` as they are: the
  adapter written directly, the version's folder hard-linking the checkpoint's weights, the digest, the probe.
The gateway's half (the engine's load and its proof) needs an engine and is not measured here.
Figures are medians over the rounds; on a shared machine compare the ratios (after / before, and each
phase's share of the step), not the seconds.

Run: ``.venv/bin/python tests/benchmarks/publication.py [--model DIR] [--rounds 5] [--samples 8]``
(default: SmolLM2-135M as ``harnessrl.engine.model_prep.prepare_smollm2`` prepares it). Writes
``tests/benchmarks/results/publication.json``. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import torch  # noqa: E402

from contracts.adapter_proof import adapter_digest  # noqa: E402
from learner.adapter_probe import fallback_probe_ids  # noqa: E402
from learner.checkpoint import atomic_write_dir, save_checkpoint, step_dir  # noqa: E402
from learner.config import LearnerConfig  # noqa: E402
from learner.publish import prepare  # noqa: E402
from learner.trainer import Trainer, build_trainer  # noqa: E402
from tests.benchmarks.learner import packed_step, synthetic_samples  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "publication.json"
PHASES = ("checkpoint_s", "write_s", "digest_s", "probe_s")
META = {"run": "bench", "group_ids": list(range(8)), "changed": False, "last_ready_at": None, "config": {}}


def legacy_save_adapter(model, folder: Path) -> None:
    """``learner.adapters.save_adapter`` before the cut: peft's save_pretrained, a named adapter moved up."""
    name = getattr(model, "active_adapter", "default")
    if name == "default":
        model.save_pretrained(folder)
        return
    model.save_pretrained(folder, selected_adapters=[name])
    for item in (Path(folder) / name).iterdir():
        shutil.move(str(item), Path(folder) / item.name)
    (Path(folder) / name).rmdir()


def legacy_checkpoint(root: Path, step: int, trainer: Trainer) -> Path:
    """``learner.checkpoint.save_checkpoint`` before the cut."""

    def write(tmp: Path) -> None:
        legacy_save_adapter(trainer.model, tmp / "adapter")
        state = {"optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.scheduler.state_dict()}
        torch.save({**state, "step": step, "version": step, "rng": torch.get_rng_state()}, tmp / "trainer.pt")
        (tmp / "meta.json").write_text(json.dumps({**META, "step": step, "version": step}, indent=1))

    return atomic_write_dir(step_dir(root, step), write)


def legacy_probe(model, token_ids: tuple[int, ...], checks: int = 16) -> tuple[list[float], list[float]]:
    """``learner.adapter_probe.adapter_probe``'s work before the cut: a forward with the adapter and one
    without, each with the output head on every position (the log-probs it returns, not its record)."""
    ids = torch.tensor([list(token_ids)], dtype=torch.long)
    model.eval()
    with torch.no_grad():
        adapted = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        with model.disable_adapter():
            base = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    model.train()
    rows = torch.arange(max(0, len(token_ids) - checks), len(token_ids))
    targets = adapted[rows].argmax(dim=-1)
    return adapted[rows, targets].tolist(), base[rows, targets].tolist()


def before(trainer: Trainer, root: Path, step: int, probe_ids: tuple[int, ...]) -> dict[str, float]:
    clock = [time.perf_counter()]
    lap = lambda: clock.append(time.perf_counter()) or clock[-1] - clock[-2]  # noqa: E731
    legacy_checkpoint(root / "checkpoints", step, trainer)
    figures = {"checkpoint_s": lap()}
    path = atomic_write_dir(root / "adapters" / f"policy-v{step}", lambda tmp: legacy_save_adapter(trainer.model, tmp))
    figures["write_s"] = lap()
    adapter_digest(path)
    figures["digest_s"] = lap()
    legacy_probe(trainer.model, probe_ids)
    return {**figures, "probe_s": lap()}


def after(trainer: Trainer, root: Path, step: int, probe_ids: tuple[int, ...]) -> dict[str, float]:
    started = time.perf_counter()
    model, optimizer, scheduler = trainer.model, trainer.optimizer, trainer.scheduler
    checkpoint = save_checkpoint(root / "checkpoints", step, step, model, optimizer, scheduler, META)
    checkpoint_s = time.perf_counter() - started
    ready = prepare(trainer.model, root / "adapters" / f"policy-v{step}", probe_ids)
    linked = os.stat(ready.path / "adapter_model.safetensors").st_ino
    assert linked == os.stat(checkpoint / "adapter" / "adapter_model.safetensors").st_ino, "not linked"
    return {
        "checkpoint_s": checkpoint_s,
        "write_s": ready.write_s,
        "digest_s": ready.digest_s,
        "probe_s": ready.probe_s,
    }


def measure(model_dir: str, rounds: int, samples: int, max_len: int, work: Path) -> dict:
    trainer = build_trainer(LearnerConfig(model_dir=model_dir))  # LoRA and AdamW as the defaults
    vocab = trainer.model.get_input_embeddings().weight.shape[0]
    batch, advantages = synthetic_samples(samples, max_len, vocab)
    probe_ids = fallback_probe_ids(vocab)
    rows: dict[str, list[dict[str, float]]] = {"before": [], "after": [], "step": []}
    for step in range(rounds + 1):  # the first round warms the caches up: not counted
        started = time.perf_counter()
        packed_step(trainer.model, trainer.optimizer, batch, advantages, 4 * max_len)
        step_s = time.perf_counter() - started
        ways = [("before", before), ("after", after)]
        for way, run in ways if step % 2 else ways[::-1]:
            figures = run(trainer, work / way, step + 1, probe_ids)
            if step:
                rows[way].append(figures)
        if step:
            rows["step"].append({"step_s": step_s})
    return {
        way: {key: statistics.median(r[key] for r in figures) for key in figures[0]} for way, figures in rows.items()
    }


def report(medians: dict) -> list[str]:
    step_s = medians["step"]["step_s"]
    lines = [f"a step: {step_s:.2f} s (median); each phase's seconds, its share of a step, after / before"]
    for phase in (*PHASES, "publication_s"):
        old, new = (medians[way].get(phase) or 0.0 for way in ("before", "after"))
        lines.append(
            f"{phase:>14}: before {old:.3f} s ({100 * old / step_s:.1f}%)  after {new:.3f} s "
            f"({100 * new / step_s:.1f}%)  x{new / old:.2f}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=8, help="samples in a step")
    parser.add_argument("--max-len", type=int, default=512, help="the longest sample's tokens")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if not args.model:
        from harnessrl.engine.model_prep import prepare_smollm2

        args.model = str(prepare_smollm2())
    with tempfile.TemporaryDirectory() as tmp:
        medians = measure(args.model, args.rounds, args.samples, args.max_len, Path(tmp))
    for way in ("before", "after"):  # the learner's half of a publication: the folder, digest, probe
        medians[way]["publication_s"] = sum(medians[way][phase] for phase in PHASES[1:])
    print("\n".join(report(medians)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model, "rounds": args.rounds, **medians}, indent=1))


if __name__ == "__main__":
    main()
