"""A short GRPO round with pi, the real agent, on one GPU: `harnessrl quickstart --harness pi` on a few
builtin:shell kinds (demonstrations, SFT, then GRPO until the learner has published v2), vLLM and the
learner sharing the GPU. Prints one JSON line per check and a summary line; exits 1 if a check fails.
Run by tests/gpu/check.sh (which says what the machine needs: pi and bubblewrap too, for this one).

Usage: python tests/gpu/pi_round.py MODEL_DIR [--timeout-s 480]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harnessrl.evaluation.periodic import held_out_results  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from store.store import Store  # noqa: E402

RUN = "gpu-pi"
KINDS = ("shell-write-*", "shell-copy-*", "shell-append-*")


def emit(**fields) -> dict:
    print(json.dumps(fields), flush=True)
    return fields


def quickstart_command(model_dir: Path, database_url: str) -> list[str]:
    include = [arg for kind in KINDS for arg in ("--include", kind)]
    return [
        *(sys.executable, "-m", "harnessrl.cli", "quickstart", "--run", RUN, "--harness", "pi"),
        *("--model", str(model_dir), "--tasks", "builtin:shell", *include),
        *("--warm-start", "--upstream", "solutions", "--sft-epochs", "3"),
        *("--minutes", "1", "--until-version", "2", "--group-size", "4", "--concurrency", "16"),
        *("--eval-every", "1000", "--eval-k", "2", "--max-model-len", "4096", "--engine-gpu-memory", "0.5"),
        *("--database-url", database_url, "--admin-key", "gpu-check-admin-key-0123456789"),
    ]


async def checks(database_url: str) -> list[dict]:
    store = Store.from_url(database_url)
    try:
        warmup, grpo = (await _summary(store, run) for run in (f"{RUN}-warmup", RUN))
        demos_ok = bool(warmup.get("rollouts")) and (warmup.get("extension_rate") or 0.0) >= 0.99
        results = [
            emit(check="demonstrations", ok=demos_ok, **_picked(warmup)),
            emit(check="grpo", ok=grpo.get("learner_steps", 0) >= 1, **_picked(grpo)),
        ]
        points = [
            {"version": r.version, "pass_at_1": r.pass_at_1, "tasks": r.tasks}
            for r in await held_out_results(store, RUN)
        ]
        results.append(emit(check="held_out", ok=len(points) >= 2, points=points))
        return results
    finally:
        await store.close()


async def _summary(store: Store, run: str) -> dict:
    run_id = await store.listings.run_id(run)
    return await store.summary.run_summary(run_id) if run_id is not None else {}


def _picked(summary: dict) -> dict:
    keys = ("rollouts", "reward_mean", "learner_steps", "extension_rate", "forks")
    return {key: summary.get(key) for key in keys}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--timeout-s", type=float, default=480.0)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="harnessrl-gpu-pi-"))
    url = sqlite_url(home / "gpu-pi.db")
    env = {**os.environ, "HARNESSRL_HOME": str(home)}
    started = time.monotonic()
    try:
        done = subprocess.run(
            quickstart_command(args.model_dir.resolve(), url), env=env, timeout=args.timeout_s, capture_output=True
        )
        finished, code = True, done.returncode
        tail = done.stdout.decode(errors="replace")[-2000:] + done.stderr.decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired as exc:
        finished, code = False, None
        tail = ((exc.stdout or b"") + (exc.stderr or b"")).decode(errors="replace")[-4000:]
    wall = time.monotonic() - started
    results = [emit(check="quickstart", ok=finished and code == 0, exit_code=code, wall_s=round(wall, 1))]
    if not results[0]["ok"]:
        emit(check="quickstart_log", tail=tail, logs=str(home / "logs"))
    results += asyncio.run(checks(url)) if (home / "gpu-pi.db").exists() else []
    failed = [r["check"] for r in results if not r["ok"]]
    emit(summary="pi_round", passed=not failed, failed=failed, home=str(home))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
