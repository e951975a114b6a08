"""One learner for several policies serves one Prometheus endpoint: each policy's steps under its own
``policy`` label, equal to its stored steps; a policy that stops or fails keeps its last values and says so
while the others train on; a taken port is refused naming the fix, never with a traceback."""

from __future__ import annotations

import asyncio
import socket

import pytest
from typer.testing import CliRunner

import learner.loop
from harnessrl.cli.app import app
from harnessrl.training.learner_folder import LearnerFolder
from learner.policies_loop import Hooks
from learner.prometheus import COUNTERS, GAUGES, PREFIX, LearnerExporter
from store.store import Store
from tests.learner_policies import configs_for, fill_run, train_policies
from tests.learner_reads import scrape, stored_steps
from tests.learner_runs import tiny_learner_config
from tests.unit.test_learner_policies_cli import learner_toml
from tests.unit.test_learner_prometheus import assert_same


@pytest.fixture
def store(file_store: Store) -> Store:
    return file_store


async def train_scraped(configs, store: Store, runs: list[str]) -> tuple[dict, dict[str, list[dict]]]:
    """Train ``runs`` in one learner on an endpoint of a free port, scraped over HTTP after each step:
    (the results, each run's scrapes in step order)."""
    exporter = LearnerExporter()
    port = exporter.serve(0)
    scraped: dict[str, list[dict]] = {run: [] for run in runs}
    hooks = Hooks(on_step=lambda run, metrics: scraped[run].append(scrape(port)), metrics=exporter)
    try:
        return await train_policies(configs, store, runs, hooks=hooks), scraped
    finally:
        exporter.close()


def assert_stored(seen: dict[str, float], rows: list[dict]) -> None:
    """A policy's series are its stored steps: gauges the last one's, counters summed over them."""
    for key, name, _ in GAUGES:
        assert_same(seen[PREFIX + name], rows[-1][key])
    for key, name, _ in COUNTERS:
        assert seen[PREFIX + name + "_total"] == sum(row[key] or 0 for row in rows), name
    assert seen[PREFIX + "step_time_seconds_count"] == len(rows)


async def test_each_policy_steps_under_its_own_label_and_a_stopped_one_keeps_its_last_values(
    store, tiny_model_dir, tmp_path
):
    await fill_run(store, "ada", 2, seed=0)
    await fill_run(store, "bob", 6, seed=100)
    configs = configs_for(tiny_model_dir, tmp_path / "out", per_run={"ada": {"max_steps": 1}}, max_steps=3)

    results, scraped = await train_scraped(configs, store, ["ada", "bob"])

    assert (results["ada"].step, results["bob"].step) == (1, 3)
    ada_rows, bob_rows = await stored_steps(store, "ada"), await stored_steps(store, "bob")
    (at_ada,) = scraped["ada"]
    assert_stored(at_ada["ada"], ada_rows)
    assert at_ada["ada"][PREFIX + "training"] == 1
    last = scraped["bob"][-1]  # bob's last step, after ada reached its max_steps
    assert set(last) == {"ada", "bob"}  # one endpoint, a label each
    assert_stored(last["bob"], bob_rows)
    assert last["bob"][PREFIX + "training"] == 1
    assert_stored(last["ada"], ada_rows)  # ada stopped: its last values stay
    assert (last["ada"][PREFIX + "training"], last["ada"][PREFIX + "failed"]) == (0, 0)


async def test_a_failed_policy_says_so_on_the_endpoint_while_the_others_train_on(
    store, tiny_model_dir, tmp_path, monkeypatch
):
    poisoned = set(await fill_run(store, "bad", 2, seed=0))
    await fill_run(store, "good", 4, seed=50)
    real = learner.loop.train_batch

    def train_batch(trainer, batch, *args, **kwargs):
        if poisoned & set(batch.group_ids):
            raise ValueError("a poisoned sample")
        return real(trainer, batch, *args, **kwargs)

    monkeypatch.setattr(learner.loop, "train_batch", train_batch)
    configs = configs_for(tiny_model_dir, tmp_path / "out", max_steps=2)

    results, scraped = await train_scraped(configs, store, ["bad", "good"])

    assert results["bad"].reason == "failed" and results["good"].step == 2
    last = scraped["good"][-1]  # fair turns: bad's one try came before good's second step
    assert (last["bad"][PREFIX + "training"], last["bad"][PREFIX + "failed"]) == (0, 1)
    assert PREFIX + "step" not in last["bad"] and last["bad"][PREFIX + "samples_trained_total"] == 0
    assert (last["good"][PREFIX + "training"], last["good"][PREFIX + "step"]) == (1, 2)


async def _fill(url: str, runs: list[str]) -> None:
    store = Store.from_url(url)
    try:
        for seed, run in enumerate(runs):
            await fill_run(store, run, 2, seed=100 * seed)  # a step's worth: a learner that ignored the port ends
    finally:
        await store.close()


def test_a_taken_metrics_port_beside_other_policies_is_refused_naming_the_fix(sqlite_db, tiny_model_dir, tmp_path):
    asyncio.run(_fill(sqlite_db, ["ada", "bob"]))
    config = learner_toml(tmp_path, tiny_model_dir)
    folder = LearnerFolder(tmp_path / "shared")
    folder.offer("ada", tiny_learner_config(tiny_model_dir, tmp_path / "jobs", max_steps=1))  # its job's settings
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        several = ["train", "--run", "ada", "--run", "bob", "--config", str(config), "--max-steps", "1"]
        several += ["--metrics-port", port]
        # a server's learner: its jobs hand their runs over through a settings folder
        jobs = ["train", "--run", "ada", "--settings-dir", str(folder.path), "--metrics-port", port]
        outputs = [CliRunner().invoke(app, [*args, "--database-url", sqlite_db]) for args in (several, jobs)]

    for result in outputs:
        assert result.exit_code == 1, result.output
        assert f"cannot serve learner metrics on 127.0.0.1:{port}" in result.output
        assert "set metrics_port to a free port, or 0 for none" in result.output
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # fail(), no crash
