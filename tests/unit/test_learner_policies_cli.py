"""`harnessrl train` with several runs or policies: one learner trains them all; names the store does not
know are refused with the known ones, and nothing is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from harnessrl.cli.app import app
from store.store import Store
from tests.learner_policies import fill_run
from tests.learner_reads import stored_checkpoints
from tests.store_snapshot import store_snapshot


def learner_toml(tmp_path: Path, model_dir: Path) -> Path:
    path = tmp_path / "learner.toml"
    path.write_text(
        f'model_dir = "{model_dir}"\noutput_dir = "{tmp_path / "out"}"\npoll_interval_s = 0.02\n'
        "[lora]\nrank = 4\nalpha = 8\n[batch]\ngroups_per_step = 2\n[publish]\nenabled = false\n"
    )
    return path


async def _fill(url: str, runs: dict[str, int]) -> None:
    store = Store.from_url(url)
    try:
        for seed, (run, n) in enumerate(runs.items()):
            await fill_run(store, run, n, seed=100 * seed)
    finally:
        await store.close()


async def _checkpoints(url: str, run: str) -> list:
    store = Store.from_url(url)
    try:
        return await stored_checkpoints(store, run)
    finally:
        await store.close()


def train(url: str, config: Path, *names: str):
    return CliRunner().invoke(app, ["train", *names, "--config", str(config), "--database-url", url])


def test_an_unknown_run_or_policy_is_refused_naming_the_known_ones_and_nothing_is_written(
    sqlite_db, tiny_model_dir, tmp_path
):
    asyncio.run(_fill(sqlite_db, {"ada": 1}))
    config = learner_toml(tmp_path, tiny_model_dir)
    before = store_snapshot(sqlite_db)

    run = train(sqlite_db, config, "--run", "ada", "--run", "adda")
    policy = train(sqlite_db, config, "--policy", "ada", "--policy", "bob")

    assert run.exit_code == 1 and "no run 'adda'" in run.output and "known runs: ada" in run.output
    assert policy.exit_code == 1 and "no policy 'bob'" in policy.output and "ada, policy" in policy.output
    assert store_snapshot(sqlite_db) == before


def test_one_train_command_trains_every_run_and_policy_it_names(sqlite_db, tiny_model_dir, tmp_path):
    asyncio.run(_fill(sqlite_db, {"ada": 2, "bob": 2}))
    config = learner_toml(tmp_path, tiny_model_dir)

    result = CliRunner().invoke(
        app,
        ["train", "--run", "ada", "--policy", "bob", "--max-steps", "1"]
        + ["--config", str(config), "--database-url", sqlite_db],
    )

    assert result.exit_code == 0, result.output
    assert "ada (ada): stopped (max_steps) at step 1" in result.output
    assert "bob (bob): stopped (max_steps) at step 1" in result.output
    for run in ("ada", "bob"):  # each in folders of its own under output_dir
        (record,) = asyncio.run(_checkpoints(sqlite_db, run))
        assert Path(record.path).parent == tmp_path / "out" / run / "checkpoints"


def test_a_policys_table_in_the_config_sets_its_runs_keys_and_no_others(sqlite_db, tiny_model_dir, tmp_path):
    asyncio.run(_fill(sqlite_db, {"ada": 2, "bob": 4}))
    config = learner_toml(tmp_path, tiny_model_dir)
    config.write_text(config.read_text() + "[policies.bob]\nmax_steps = 2\n")  # bob's runs: 2 steps, ada's: 1

    result = CliRunner().invoke(
        app, ["train", "--run", "ada", "--max-steps", "1", "--config", str(config), "--database-url", sqlite_db]
    )

    assert result.exit_code == 0, result.output
    assert "ada (ada): stopped (max_steps) at step 1" in result.output
    assert "bob (bob): stopped (max_steps) at step 2" in result.output
