"""One learner for N policies against N learners: resident memory, steps/s, and publication's share.

For N = 1, 2, 4 (``--policies``), each policy a run with ready groups in its own SQLite store copy:
- ``shared``: one process, ``learner.policies_loop.run_policies`` over the N runs (the base model once);
- ``separate``: N processes at once, each ``learner.loop.run_learner`` on one run (N base models).
Every process is fresh (its peak RSS is its own: ``ru_maxrss``); ``separate`` reports the sum of its
processes' peaks. Steps/s are steps of all policies over the wall time from the first to the last step.
Each policy publishes every step to a local publisher that does the learner's half of a publication
(save the adapter, its digest, the probe: ``learner.publish.prepare``, ``Publisher.publish`` without the
gateway's load, which needs an engine); its share is that time over the step's and its own together
(``swap_time_s / (step_time_s + swap_time_s)``).

Run: ``.venv/bin/python tests/benchmarks/learner_policies.py [--model DIR] [--steps 6] [--policies 1,2,4]``
(default: the tiny model, built once under a temporary folder). Writes
``tests/benchmarks/results/learner_policies.json``. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

DEFAULT_OUT = Path(__file__).parent / "results" / "learner_policies.json"


class LocalPublisher:
    """The learner's side of a publication (save, digest, probe), timed; no gateway."""

    def __init__(self, folder: Path):
        self.folder, self.policy, self.version = folder, "", 0

    async def current_version(self) -> int:
        return self.version

    async def max_model_len(self) -> int | None:
        return None

    async def max_staleness(self) -> int | None:
        return None

    async def publish(self, model, version: int, probe_ids=None):
        from learner.publish import Published, prepare

        ready = prepare(model, self.folder / f"{self.policy}-v{version}", probe_ids)
        self.version = version
        took = ready.save_s
        return Published(
            version, ready.path.name, str(ready.path), took, took, None, 1, ready.digest, (), ready.write_s,
            ready.digest_s, ready.probe_s,
        )  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    """One process: train ``args.runs`` (shared) or its one run (alone); print its figures as JSON."""
    from learner.config import LearnerConfig, resolve_paths
    from learner.loop import run_learner
    from learner.policies_loop import Hooks, fixed_runs, run_policies
    from store.store import Store

    out, runs = Path(args.work), args.runs.split(",")
    steps: list[tuple[float, float, float]] = []  # (end time, step_time_s, swap_time_s)

    def config(run: str) -> LearnerConfig:
        settings = LearnerConfig(
            model_dir=args.model, max_steps=args.steps, poll_interval_s=0.02, lora={"rank": 8, "alpha": 16},
            batch={"groups_per_step": 2, "max_staleness": 100, "token_budget": 4096}, publish={"admin_key": "x"},
        )  # fmt: skip
        return resolve_paths(settings, out / run)

    def record(metrics) -> None:
        steps.append((time.perf_counter(), metrics["step_time_s"], metrics.get("swap_time_s") or 0.0))

    async def train() -> None:
        store = Store.from_url(args.db)
        publishers = {run: LocalPublisher(out / run / "served") for run in runs}
        try:
            if args.mode == "shared":
                await run_policies(
                    config, store, fixed_runs(runs), publisher_for=lambda run, _: publishers[run],
                    hooks=Hooks(on_step=lambda _, m: record(m)), poll_interval_s=0.02, handle_signals=False,
                )  # fmt: skip
            else:
                (run,) = runs
                await run_learner(config(run), store, run, publisher=publishers[run], on_step=record)
        finally:
            await store.close()

    started = time.perf_counter()
    asyncio.run(train())
    first_end = min(end for end, _, _ in steps)
    figures = {
        "steps": len(steps),
        "wall_s": time.perf_counter() - started,
        "stepping_s": max(end for end, _, _ in steps) - first_end + steps[0][1],
        "step_s": sum(s for _, s, _ in steps),
        "publish_s": sum(p for _, _, p in steps),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    print(json.dumps(figures))


def _spawn(mode: str, runs: list[str], db: str, model: str, work: Path, steps: int) -> subprocess.Popen:
    command = [sys.executable, __file__, "--worker", mode, "--runs", ",".join(runs), "--db", db]
    command += ["--model", model, "--work", str(work), "--steps", str(steps)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _figures(process: subprocess.Popen) -> dict:
    stdout, _ = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"a worker failed ({process.returncode}); its output: {stdout[-2000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _store(root: Path, template: Path, runs: list[str], groups: int) -> str:
    from store.database import sqlite_url
    from store.store import Store
    from tests.learner_policies import fill_run

    path = root / "store.db"
    shutil.copyfile(template, path)

    async def fill() -> None:
        store = Store.from_url(sqlite_url(path))
        try:
            for k, run in enumerate(runs):
                await fill_run(store, run, groups, seed=1000 * k)
        finally:
            await store.close()

    asyncio.run(fill())
    return sqlite_url(path)


def measure(n: int, model: str, template: Path, root: Path, steps: int) -> dict:
    """Shared and separate figures for n policies."""
    runs = [f"policy{k}" for k in range(n)]
    shared_root, separate_root = root / f"shared-{n}", root / f"separate-{n}"
    shared_root.mkdir()
    separate_root.mkdir()
    shared = _figures(_spawn("shared", runs, _store(shared_root, template, runs, 2 * steps), model, shared_root, steps))
    alone = []
    for run in runs:  # each process its own store: no SQLite lock contention between learners
        (separate_root / run).mkdir()
        alone.append((run, _store(separate_root / run, template, [run], 2 * steps)))
    processes = [_spawn("alone", [run], db, model, separate_root / run, steps) for run, db in alone]
    separate = [_figures(p) for p in processes]
    return {
        "policies": n,
        "shared": {**shared, "steps_per_s": shared["steps"] / shared["stepping_s"]},
        "separate": {
            "peak_rss_gib": sum(f["peak_rss_gib"] for f in separate),
            "steps": sum(f["steps"] for f in separate),
            "steps_per_s": sum(f["steps"] / f["stepping_s"] for f in separate),
        },
        # a step with its publication: the publication's part of it
        "publish_share": shared["publish_s"] / (shared["step_s"] + shared["publish_s"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--policies", default="1,2,4")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--worker", choices=("shared", "alone"))
    parser.add_argument("--runs", default="")
    parser.add_argument("--db", default="")
    parser.add_argument("--work", default="")
    args = parser.parse_args()
    if args.worker:
        args.mode = args.worker
        worker(args)
        return
    from harnessrl.engine.model_prep import build_tiny_model
    from migrations.runner import upgrade
    from store.database import sqlite_url

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = args.model or str(build_tiny_model(root / "tiny"))
        template = root / "template.db"
        upgrade(sqlite_url(template))
        (root / "warm-up").mkdir()
        measure(1, model, template, root / "warm-up", 2)  # the first processes pay for cold caches: not counted
        rows = [measure(int(n), model, template, root, args.steps) for n in args.policies.split(",")]
    for row in rows:
        s, p = row["shared"], row["separate"]
        print(
            f"N={row['policies']}: one process {s['peak_rss_gib']:.2f} GiB, {s['steps_per_s']:.2f} steps/s; "
            f"N processes {p['peak_rss_gib']:.2f} GiB, {p['steps_per_s']:.2f} steps/s; "
            f"publication {100 * row['publish_share']:.0f}% of a step"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model or "tiny", "steps": args.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
