"""Several policies in one learner under `torchrun --nproc_per_node 2` (gloo, CPU, ``[parallel] shard =
"none"``): rank 0 runs the policies' loop, rank 1 mirrors each policy's adapter and steps
(learner.policy_followers), and every policy's adapter equals what one process trains."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from store.database import sqlite_url
from store.store import Store
from tests.integration.test_learner_ddp import assert_same_weights
from tests.learner_policies import fill_run

REPO = Path(__file__).resolve().parents[2]
STEPS = 2
RUNS = ("ada", "bob")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


async def _fill(url: str) -> None:
    """Each run (its own policy) gets the groups of STEPS steps, with a learning signal in each."""
    store = Store.from_url(url)
    try:
        for seed, run in enumerate(RUNS):
            await fill_run(store, run, 2 * STEPS, seed=100 * seed)
    finally:
        await store.close()


def _config(path: Path, model_dir: Path, out: Path) -> Path:
    """Several packed rows per step (token_budget 64): both ranks get a share of each policy's batch."""
    path.write_text(
        f'model_dir = "{model_dir}"\noutput_dir = "{out}"\npoll_interval_s = 0.05\n'
        "[lora]\nrank = 4\nalpha = 8\n[optimizer]\nlr = 0.001\n[batch]\ngroups_per_step = 2\n"
        'max_staleness = 100\ntoken_budget = 64\n[publish]\nenabled = false\n[parallel]\nshard = "none"\n'
    )
    return path


def _train(prefix: list[str], db: Path, config: Path) -> subprocess.CompletedProcess:
    # `--`: torchrun would take `--run` for an abbreviation of its own --run-path
    names = [arg for run in RUNS for arg in ("--run", run)]
    command = [*prefix, "-m", "harnessrl.cli", "--", "train", *names, "--config", str(config)]
    command += ["--database-url", sqlite_url(db), "--max-steps", str(STEPS)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two ranks share the machine's cores
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _adapter(out: Path, run: str) -> dict[str, torch.Tensor]:
    return load_file(out / run / "checkpoints" / f"step-{STEPS:08d}" / "adapter" / "adapter_model.safetensors")


def _losses(db: Path) -> list[float]:
    with sqlite3.connect(db) as connection:
        query = "select json_extract(metrics, '$.loss') from learner_steps order by run_id, step"
        return [row[0] for row in connection.execute(query)]


def test_two_policies_under_torchrun_train_the_adapters_one_process_trains(
    tmp_path, tiny_model_dir, migrated_sqlite_file
):
    template = tmp_path / "filled.db"
    shutil.copyfile(migrated_sqlite_file, template)
    asyncio.run(_fill(sqlite_url(template)))
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    shutil.copyfile(template, one)
    shutil.copyfile(template, two)

    alone = _train([sys.executable], one, _config(tmp_path / "one.toml", tiny_model_dir, tmp_path / "out-one"))
    ranks = _train(TORCHRUN, two, _config(tmp_path / "two.toml", tiny_model_dir, tmp_path / "out-two"))

    for run in RUNS:
        said = f"{run} ({run}): stopped (max_steps) at step {STEPS}"  # the CLI's console: on stderr
        assert said in alone.stderr and said in ranks.stderr
        assert_same_weights(_adapter(tmp_path / "out-two", run), _adapter(tmp_path / "out-one", run))
    assert f"rank 1: rank 0 stopped after {2 * STEPS} steps here (p0: {STEPS}, p1: {STEPS})" in ranks.stderr
    # each adapter is its own policy's: the two trained apart
    ada, bob = (_adapter(tmp_path / "out-one", run) for run in RUNS)
    assert any(not torch.equal(ada[key], bob[key]) for key in ada)
    losses_one, losses_two = _losses(one), _losses(two)
    assert len(losses_one) == 2 * STEPS and losses_two == pytest.approx(losses_one, rel=1e-5, abs=1e-7)
