"""The learner's step under `torchrun --nproc_per_node 2` (gloo, CPU) equals one process on the whole
batch: same LoRA weights after the steps, same metrics, on both ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from learner.ddp_check import MAX_GRAD_NORM, fixed_rows, lora_weights, run_steps, tiny_lora_model
from learner.distributed import shard

REPO = Path(__file__).resolve().parents[2]
STEPS = 2


def torchrun_check(out: Path) -> list[dict]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "learner.ddp_check",
        "--out",
        str(out),
        "--steps",
        str(STEPS),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two ranks share the machine's cores
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]


def single_process(rows_of=None) -> tuple[dict[str, torch.Tensor], list[dict]]:
    model = tiny_lora_model()
    rows = fixed_rows(model)
    metrics = run_steps(model, rows if rows_of is None else rows_of(rows), STEPS)
    return lora_weights(model), metrics


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, atol=1e-6, rtol=1e-5, msg=name)


def test_two_ranks_take_the_same_steps_as_one_process_on_the_whole_batch(tmp_path):
    ranks = torchrun_check(tmp_path)
    want_weights, want_metrics = single_process()
    assert all(r["rows"] > 0 for r in ranks) and sum(r["rows"] for r in ranks) == ranks[0]["of_rows"]
    for result in ranks:
        assert_same_weights(result["weights"], want_weights)
        for got, want in zip(result["metrics"], want_metrics, strict=True):
            assert got["optimizer_stepped"] and want["optimizer_stepped"]
            assert (got["tokens_trained"], got["tokens"], got["rows"]) == (
                want["tokens_trained"],
                want["tokens"],
                want["rows"],
            )
            for key in (
                "loss",
                "grad_norm",
                "ratio_min",
                "ratio_max",
                "clip_frac_low",
                "clip_frac_high",
                "is_masked_fraction",
            ):
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    first = want_metrics[0]
    assert first["is_masked_fraction"] > 0 and first["clip_frac_low"] + first["clip_frac_high"] > 0
    assert first["grad_norm"] > MAX_GRAD_NORM  # clipped, by the norm over both ranks' gradients


def test_one_rank_alone_would_take_a_different_step():
    """The comparison above has teeth: without the all-reduce, a rank's update is not the batch's."""
    whole, _ = single_process()
    half, _ = single_process(lambda rows: shard(rows, [r.num_tokens for r in rows], 0, 2))
    moved = max(float((half[k] - whole[k]).abs().max()) for k in whole)
    assert moved > 1e-4


# --- the whole learner: `harnessrl train` under torchrun -----------------------------------------

RUN = "ddp-run"


async def _fill(url: str, groups: int) -> None:
    """Ready groups of 4 one-call rollouts with varied rewards (a learning signal in each)."""
    import numpy as np

    from store.store import Store
    from tests.builders import call_record

    store = Store.from_url(url)
    rng = np.random.default_rng(0)
    try:
        for g in range(groups):
            for reward in (0.0, 1.0, 0.5, float(g % 2)):
                identity = await store.create_rollout(RUN, f"task-{g}", group_size=4)
                await store.insert_calls(
                    [
                        call_record(
                            identity.rollout_id,
                            prompt_ids=rng.integers(10, 1000, int(rng.integers(8, 30))).tolist(),
                            output_ids=rng.integers(10, 1000, 6).tolist(),
                            output_logprobs=[-7.6] * 6,
                        )
                    ]
                )
                await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": reward})
    finally:
        await store.close()


def _train(command_prefix: list[str], home: Path, db: Path, config: Path) -> subprocess.CompletedProcess:
    from store.database import sqlite_url

    # `--`: torchrun would take `--run` for an abbreviation of its own --run-path
    command = [
        *command_prefix,
        "-m",
        "harnessrl.cli",
        "--",
        "train",
        "--run",
        RUN,
        "--config",
        str(config),
        "--database-url",
        sqlite_url(db),
        "--max-steps",
        str(STEPS),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HARNESSRL_HOME": str(home)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _adapter(home: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    [path] = home.glob(f"**/step-{STEPS:08d}/adapter/adapter_model.safetensors")
    return load_file(path)


def _consumed_and_losses(db: Path) -> tuple[list, list]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        consumed = connection.execute("select id from groups where status = 'consumed' order by id").fetchall()
        losses = [
            row[0]
            for row in connection.execute("select json_extract(metrics, '$.loss') from learner_steps order by step")
        ]
    return consumed, losses


@pytest.mark.parametrize("shard", ["none", "fsdp"])  # fsdp: the base sharded by FSDP2 (learner/sharding.py)
def test_harnessrl_train_under_torchrun_matches_one_process(shard, tmp_path, tiny_model_dir, migrated_sqlite_file):
    import asyncio
    import shutil

    from store.database import sqlite_url

    template = tmp_path / "filled.db"
    shutil.copyfile(migrated_sqlite_file, template)
    asyncio.run(_fill(sqlite_url(template), groups=2 * STEPS))
    config = tmp_path / "learner.toml"
    config.write_text(
        f'model_dir = "{tiny_model_dir}"\npoll_interval_s = 0.05\n[lora]\nrank = 4\nalpha = 8\n'
        f"[optimizer]\nlr = 0.001\n[batch]\ngroups_per_step = 2\nmax_staleness = 100\ntoken_budget = 64\n"
        f'[publish]\nenabled = false\n[parallel]\nshard = "{shard}"\n'
    )  # several packed rows per step: both ranks get a share; one process ignores shard (the reference)
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    shutil.copyfile(template, one)
    shutil.copyfile(template, two)

    _train([sys.executable], tmp_path / "home-one", one, config)
    ranks = _train(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
        tmp_path / "home-two",
        two,
        config,
    )

    assert "rank 1: rank 0 stopped after 2 steps here" in ranks.stderr
    assert ("FSDP2: rank 1 holds" in ranks.stderr) == (shard == "fsdp")  # the base was sharded, or not
    assert_same_weights(_adapter(tmp_path / "home-two"), _adapter(tmp_path / "home-one"))
    (consumed_one, losses_one), (consumed_two, losses_two) = _consumed_and_losses(one), _consumed_and_losses(two)
    assert consumed_two == consumed_one and len(consumed_one) == 2 * STEPS
    assert losses_two == pytest.approx(losses_one, rel=1e-5, abs=1e-7) and len(losses_one) == STEPS
    # per-token mismatch: rank 0 stores every rank's calls, as one process stores all of them
    deltas_one, deltas_two = _stored_deltas(one), _stored_deltas(two)
    assert deltas_one and deltas_two.keys() == deltas_one.keys()
    for call_id, values in deltas_one.items():
        np.testing.assert_allclose(deltas_two[call_id], values, atol=1e-3, equal_nan=True)


def _stored_deltas(db: Path) -> dict[int, np.ndarray]:
    import sqlite3

    from store.arrays import deltas_array

    with sqlite3.connect(db) as connection:
        rows = connection.execute("select call_id, deltas from call_mismatch").fetchall()
    return {call_id: deltas_array(blob) for call_id, blob in rows}
