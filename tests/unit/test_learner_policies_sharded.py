"""Several policies under torchrun train with data parallelism only: an FSDP-sharded base is refused, naming
the fix, by the learner (each run's start) and by `harnessrl train` before anything starts. (Data
parallelism itself: tests/integration/test_learner_policies_ddp.py.)"""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

import learner.policies_loop
from harnessrl.cli.app import app
from learner.policy_followers import SHARDED_POLICIES, refuse_sharded
from learner.progress import LearnerError
from store.store import Store
from tests.learner_policies import configs_for, fill_run, train_policies
from tests.store_snapshot import store_snapshot
from tests.unit.test_learner_policies_cli import learner_toml


def test_only_a_sharded_base_under_torchrun_is_refused(tiny_model_dir, tmp_path):
    config = configs_for(tiny_model_dir, tmp_path)("ada")
    sharded = config.updated(parallel={"shard": "fsdp"})
    refuse_sharded(config, 2)  # data parallelism
    refuse_sharded(sharded, 1)  # one process: nothing is sharded
    with pytest.raises(LearnerError, match=r"parallel.shard = 'none'.*a learner of its own"):
        refuse_sharded(sharded, 2)


async def test_the_learner_refuses_each_policy_on_a_sharded_base_under_torchrun(
    file_store: Store, tiny_model_dir, tmp_path, monkeypatch
):
    for seed, run in enumerate(("ada", "bob")):
        await fill_run(file_store, run, 1, seed=seed)
    monkeypatch.setattr(learner.policies_loop, "world", lambda: (0, 2))  # as rank 0 of two
    configs = configs_for(tiny_model_dir, tmp_path, max_steps=1, parallel={"shard": "fsdp"})

    results = await train_policies(configs, file_store, ["ada", "bob"])

    assert {run: (r.reason, r.error) for run, r in results.items()} == {
        "ada": ("failed", SHARDED_POLICIES),
        "bob": ("failed", SHARDED_POLICIES),
    }


def test_train_refuses_several_policies_on_a_sharded_base_under_torchrun(
    sqlite_db, tiny_model_dir, tmp_path, monkeypatch
):
    async def fill() -> None:
        store = Store.from_url(sqlite_db)
        try:
            for seed, run in enumerate(("ada", "bob")):
                await fill_run(store, run, 1, seed=seed)
        finally:
            await store.close()

    asyncio.run(fill())
    config = learner_toml(tmp_path, tiny_model_dir)
    config.write_text(config.read_text() + '[parallel]\nshard = "fsdp"\n')
    before = store_snapshot(sqlite_db)
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it: refused before the process group is joined

    result = CliRunner().invoke(
        app, ["train", "--run", "ada", "--run", "bob", "--config", str(config), "--database-url", sqlite_db]
    )

    said = " ".join(result.output.split())  # as the console wrapped it
    assert result.exit_code == 1 and SHARDED_POLICIES in said
    assert store_snapshot(sqlite_db) == before
