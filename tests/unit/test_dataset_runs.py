"""`harnessrl run --split/--include/--exclude`: the runner gets only the selected tasks."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from harnesses.datasets import Selection, load_selection
from harnessrl.cli.app import app
from harnessrl.cli.jobs import run_config_path
from harnessrl.config.files import load_config
from harnessrl.config.jobs import RunConfig
from harnessrl.server import BackgroundGateway
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply

UNISOLATED = [] if shutil.which("bwrap") else ["--allow-unisolated"]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))  # where a run keeps its config


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    fake_engine.script = lambda body: FakeReply(content="42")
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        yield gateway


def tasks_run(gateway_url: str, run: str) -> set[str]:
    rows = http.get(f"{gateway_url}/api/rollouts", params={"run": run, "limit": 1000}, headers=ADMIN_HEADERS)
    return {r["task"] for r in rows.json()["data"]}


def run_cli(gateway_url: str, run: str, *options: str):
    return CliRunner().invoke(
        app,
        [
            "run",
            "--tasks",
            "builtin:arithmetic",
            "--run",
            run,
            "--group-size",
            "1",
            "--gateway",
            gateway_url,
            "--admin-key",
            TEST_ADMIN_KEY,
            *UNISOLATED,
            *options,
        ],
    )


def test_run_on_the_test_split_runs_exactly_the_held_out_tasks(live_gateway):
    result = run_cli(live_gateway.url, "split-run", "--split", "test")
    assert result.exit_code == 0, result.output
    held_out = {t.name for t in load_selection("builtin:arithmetic", Selection(split="test"))}
    assert tasks_run(live_gateway.url, "split-run") == held_out
    kept = load_config(RunConfig, run_config_path("split-run"), {})  # the run's config, kept with it
    assert (kept.tasks.split, kept.group_size, kept.policy, kept.gateway.admin_key) == ("test", 1, "builtin", None)


def test_run_with_globs_runs_the_matching_tasks_and_an_empty_selection_names_the_fix(live_gateway):
    result = run_cli(live_gateway.url, "glob-run", "--include", "add-00*", "--exclude", "add-001-*")
    assert result.exit_code == 0, result.output
    ran = tasks_run(live_gateway.url, "glob-run")
    assert ran == {
        f"add-00{i}-{q}"
        for i, q in ((0, "7+7"), (2, "9+8"), (3, "7+5"), (4, "8+6"), (5, "4+9"), (6, "3+5"), (7, "3+2"), (8, "5+9"))
    }
    empty = run_cli(live_gateway.url, "none-run", "--include", "nothing-*")
    assert empty.exit_code == 1 and "--include/--exclude" in empty.output
