"""One learner for the jobs of a server: a warm-started policy beside another gets the adapter it gets alone;
a run's settings come from its job's folder when it writes them, and its job stops it alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.training.learner_folder import LearnerFolder, SharedLearner
from learner.adapters import save_adapter
from learner.policies_loop import Hooks
from learner.trainer import build_trainer
from store.store import Store
from tests.learner_policies import checkpoint_adapter, configs_for, fill_run, train_policies
from tests.learner_runs import tiny_learner_config, train_run
from tests.waiting import until


@pytest.fixture
def store(file_store: Store) -> Store:
    return file_store


def warm_adapter(model_dir: Path, folder: Path) -> Path:
    """An SFT-like adapter: a fresh LoRA whose B matrices moved off zero."""
    trainer = build_trainer(tiny_learner_config(model_dir, folder / "make", seed=7))
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    save_adapter(trainer.model, folder / "warm")
    return folder / "warm"


async def test_a_warm_started_policy_beside_another_gets_the_adapter_it_gets_alone(
    store, second_store, tiny_model_dir, tmp_path
):
    warm = {"init_adapter": str(warm_adapter(tiny_model_dir, tmp_path)), "beta": 0.1, "max_steps": 2}
    await fill_run(second_store, "ada", 4, seed=0)
    alone = configs_for(tiny_model_dir, tmp_path / "alone", **warm)("ada")
    await train_run(alone, second_store, "ada")
    await fill_run(store, "bob", 4, seed=100)
    await fill_run(store, "ada", 4, seed=0)
    configs = configs_for(tiny_model_dir, tmp_path / "shared", {"ada": warm}, max_steps=2)

    results = await train_policies(configs, store, ["bob", "ada"])  # ada's adapter loaded beside bob's

    assert {run: (r.step, r.error) for run, r in results.items()} == {"bob": (2, None), "ada": (2, None)}
    shared, lone = checkpoint_adapter(configs("ada"), 2), checkpoint_adapter(alone, 2)
    assert shared.keys() == lone.keys()
    for key in shared:
        torch.testing.assert_close(shared[key], lone[key], rtol=0, atol=1e-5)


async def test_a_run_joins_when_its_job_hands_it_over_and_its_job_stops_it_alone(store, tiny_model_dir, tmp_path):
    folder = LearnerFolder(tmp_path / "shared")
    await fill_run(store, "ada", 2, seed=0)
    await fill_run(store, "bob", 2, seed=100)
    folder.offer("bob", tiny_learner_config(tiny_model_dir, tmp_path / "out" / "bob"))
    stepped: list[str] = []
    training = asyncio.create_task(
        train_policies(
            folder.settings,
            store,
            ["ada", "bob"],
            hooks=Hooks(lambda run, _: stepped.append(run), stops=folder.stop_asked, on_end=folder.write_result),
        )
    )
    await until(lambda: "bob" in stepped, "bob's first step")
    assert "ada" not in stepped  # no settings yet: it waits
    folder.offer("ada", tiny_learner_config(tiny_model_dir, tmp_path / "out" / "ada"))
    await until(lambda: "ada" in stepped, "ada's first step once its settings were written")

    await asyncio.to_thread(SharedLearner(folder, "bob").stop, 60)  # returns once bob's result is written

    assert folder.result("bob")["reason"] == "stopped" and folder.result("ada") is None and not training.done()
    folder.ask_stop("ada")
    results = await training
    assert {run: r.reason for run, r in results.items()} == {"ada": "stopped", "bob": "stopped"}
    assert folder.result("ada")["step"] == 1


def test_train_with_a_settings_folder_trains_each_run_on_its_settings_and_says_its_memory(
    sqlite_db, tiny_model_dir, tmp_path
):
    async def fill() -> None:
        store = Store.from_url(sqlite_db)
        try:
            await fill_run(store, "ada", 2, seed=0)
        finally:
            await store.close()

    asyncio.run(fill())
    folder = LearnerFolder(tmp_path / "shared")
    folder.offer("ada", tiny_learner_config(tiny_model_dir, tmp_path / "out", max_steps=1))

    result = CliRunner().invoke(
        app, ["train", "--run", "ada", "--settings-dir", str(folder.path), "--database-url", sqlite_db]
    )

    assert result.exit_code == 0, result.output
    assert "ada (ada): stopped (max_steps) at step 1" in result.output
    assert "learner resident memory" in result.output and folder.result("ada")["reason"] == "max_steps"
