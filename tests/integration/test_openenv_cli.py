"""`harnessrl run --tasks openenv:SPEC` and `harnessrl train`, the commands docs/running.md shows, as users type them.

The environment (tests/openenv_env.py, an installed MODULE:CLASS) is served per rollout; OpenCode runs in
its docker sandbox with the environment's tools through the gateway; a scripted engine plays the model
(right in one rollout, wrong in the other). The CLI finds the gateway's admin key where `serve` keeps it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harnesses.openenv.tasks import REWARD_NAME
from harnessrl.server import BackgroundGateway, BackgroundServer
from harnessrl.settings import admin_key
from tests import http_calls as http
from tests.builders import gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.integration.openenv_scripts import mcp_script

SPEC = "openenv:tests.openenv_env:AdderEnvironment"
RUN = "cli-openenv"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESSRL_ADMIN_KEY", raising=False)
    monkeypatch.setenv("ADDER_LOG", str(tmp_path / "adder.log"))  # the environment servers inherit it
    return tmp_path / "home"


@pytest.fixture
def gateway(sqlite_db, home) -> Iterator[BackgroundGateway]:
    engine = FakeEngine(model="fake-base", max_model_len=1_000_000)
    engine.script = mcp_script()
    with (
        BackgroundServer(create_fake_engine_app(engine)) as fake,
        BackgroundGateway(gateway_settings(sqlite_db, fake.url, admin_key=admin_key(create=True))) as gw,
    ):
        yield gw


def cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harnessrl.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )


def said(done: subprocess.CompletedProcess) -> str:
    """What the command printed, on either stream, its lines as the console wrapped them joined again."""
    return " ".join((done.stdout + done.stderr).split())


def test_run_then_train_on_an_openenv_environment_from_the_cli(gateway, sqlite_db, tiny_model_dir, tmp_path):
    ran = cli(
        "run",
        "--tasks",
        SPEC,
        "--include",
        "adder-train-add-2-3",
        "--harness",
        "opencode",
        "--sandbox",
        "docker",
        "--group-size",
        "2",
        "--concurrency",
        "2",
        "--run",
        RUN,
        "--gateway",
        gateway.url,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 rollouts this time (2 finished, 0 failed), mean reward 0.500" in said(ran)
    rollouts = http.get(
        f"{gateway.url}/api/rollouts", params={"run": RUN}, headers={"x-admin-key": admin_key()}
    ).json()["data"]
    views = [
        http.get(f"{gateway.url}/api/rollouts/{r['id']}", headers={"x-admin-key": admin_key()}).json() for r in rollouts
    ]
    assert sorted(v["rewards"][REWARD_NAME] for v in views) == [0.0, 1.0]  # the environment's, as recorded
    assert sorted((tmp_path / "adder.log").read_text().splitlines()) == [
        "add(2, 3)",
        "add(2, 3)",
        "submit(5)",
        "submit(6)",
    ]

    config = tmp_path / "learner.toml"
    config.write_text(
        f'model_dir = "{tiny_model_dir}"\npoll_interval_s = 0.2\n[batch]\ngroups_per_step = 1\nmax_staleness = 1000\n'
        "[publish]\nenabled = false\n[lora]\nrank = 4\n"
    )
    trained = cli("train", "--run", RUN, "--config", str(config), "--database-url", sqlite_db, "--max-steps", "1")
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert "learner stopped (max_steps) at step 1" in said(trained)


def test_quickstart_on_an_openenv_environment_names_the_commands_that_run_it(home):
    answered = cli("quickstart", "--tasks", SPEC)
    assert answered.returncode != 0
    assert "harnessrl run --tasks openenv:" in said(answered) and "Traceback" not in said(answered)
