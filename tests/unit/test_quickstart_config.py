"""`harnessrl quickstart` is data too: its options set keys of ``QuickstartConfig``, a TOML file (--config)
gives them, --show-config prints them back, and the Makefile's demos are recipes in the repository
(harnessrl/recipes/) that say what their command lines used to."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.cli.job_config import option_keys
from harnessrl.cli.jobs import run_config_path
from harnessrl.cli.quickstart_job import QUICKSTART_CONFIG
from harnessrl.cli.training import quickstart
from harnessrl.config.files import load_config
from harnessrl.config.jobs import QuickstartConfig
from harnessrl.recipes import recipe_path
from tests.unit.test_run_config import leaves

ROOT = Path(__file__).resolve().parents[2]
# make demo's command line before its recipe was a file (the README's measured runs ran it).
DEMO_COMMAND = (
    "--run demo-pi --harness pi --tasks builtin:shell --minutes 20 --warm-start --upstream solutions "
    "--sft-epochs 2 --sft-lr 2e-3 --call-max-tokens 128 --test-fraction 0.125 --eval-every 1000 "
    "--unseen-tasks builtin:shell-unseen --capture tito"
).split()
ARITHMETIC_COMMAND = "--harness builtin --minutes 14".split()


def invoke(*args: str):
    return CliRunner().invoke(app, ["quickstart", *args], env={"COLUMNS": "300"})


def shown(tmp_path: Path, *args: str) -> QuickstartConfig:
    result = invoke(*args, "--show-config")
    assert result.exit_code == 0, result.output
    path = tmp_path / "shown.toml"
    path.write_text(result.stdout)
    return load_config(QuickstartConfig, path, {})


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))


@pytest.mark.parametrize(("recipe", "command"), [("demo", DEMO_COMMAND), ("arithmetic", ARITHMETIC_COMMAND)])
def test_a_recipe_is_the_command_line_it_replaces(tmp_path, recipe, command):
    from_file = shown(tmp_path, "--config", str(recipe_path(recipe)))
    assert from_file == shown(tmp_path, *command)


@pytest.mark.parametrize(("target", "recipe"), [("demo", "demo"), ("demo-arithmetic", "arithmetic")])
def test_the_makefiles_demos_run_their_recipes(target, recipe):
    rule = re.search(rf"^{target}:.*?(?=^\S|\Z)", (ROOT / "Makefile").read_text(), re.M | re.S).group(0)
    commands = [line.strip() for line in rule.splitlines() if "harnessrl quickstart" in line]
    assert commands == [f"$(BIN)/harnessrl quickstart --config harnessrl/recipes/{recipe}.toml $(DEMO_ARGS)"]


def test_the_recipes_ship_with_the_package():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert data["harnessrl.recipes"] == ["*.toml"]
    assert sorted(p.name for p in recipe_path("demo").parent.glob("*.toml")) == ["arithmetic.toml", "demo.toml"]


def test_an_option_wins_over_the_recipe_and_the_rest_of_it_stands(tmp_path):
    config = shown(tmp_path, "--config", str(recipe_path("demo")), "--minutes", "60", "--eval-every", "10")
    assert (config.minutes, config.evaluation.every) == (60.0, 10)
    assert (config.harness, config.teacher.model, config.warm_start.sft_lr) == ("pi", "solutions", 2e-3)


def test_show_config_prints_every_key_and_reading_it_back_gives_the_same_config(tmp_path):
    config = shown(tmp_path, "--harness", "pi", "--warm-start", "--gateway", "http://127.0.0.1:9", "--lr", "1e-4")
    assert (config.harness, config.warm_start.enabled, config.gateway.url, config.learner.lr) == (
        "pi",
        True,
        "http://127.0.0.1:9",
        1e-4,
    )
    again = invoke("--config", str(tmp_path / "shown.toml"), "--show-config")
    assert again.stdout == (tmp_path / "shown.toml").read_text()


def test_every_key_of_quickstart_is_an_option_and_every_option_a_key():
    assert {sets.key for sets in option_keys(quickstart).values()} == leaves(QuickstartConfig)


def test_a_bad_recipe_is_refused_naming_the_file_and_the_key(tmp_path):
    path = tmp_path / "recipe.toml"
    path.write_text("[warm_start]\nsft_epocs = 2\n")
    result = invoke("--config", str(path))
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{path}: unknown key warm_start.sft_epocs: [warm_start] takes enabled, rounds" in message


def test_a_quickstart_keeps_its_config_beside_the_runs_files_once_its_checks_pass(tmp_path, monkeypatch):
    from harnessrl.training.quickstart import Quickstart

    (tmp_path / "config.json").write_text('{"max_position_embeddings": 8192}')
    plans = []
    monkeypatch.setattr(Quickstart, "run", lambda self, gateway=None: plans.append(self.plan) or (tmp_path, None))
    database = f"sqlite+aiosqlite:///{tmp_path}/db.sqlite"
    result = invoke("--run", "kept", "--model", str(tmp_path), "--admin-key", "k", "--database-url", database)
    assert result.exit_code == 0, result.output
    kept = load_config(QuickstartConfig, run_config_path("kept").with_name(QUICKSTART_CONFIG), {})
    assert (kept.run, kept.engine.model, kept.gateway.admin_key) == ("kept", tmp_path, None)  # the key is never kept
    assert kept.policy == "builtin"  # resolved: the harness's name
    assert [plan.run for plan in plans] == ["kept"] and plans[0].admin_key == "k"


def test_the_echo_weight_reaches_the_learner_and_a_negative_one_is_refused_naming_the_key(tmp_path, monkeypatch):
    from harnessrl.cli import quickstart_job
    from harnessrl.training.quickstart_plan import learner_config

    assert shown(tmp_path, "--echo-weight", "0.25").learner.echo_weight == 0.25
    config = load_config(QuickstartConfig, None, {"learner": {"echo_weight": 0.25}})
    monkeypatch.setattr(quickstart_job, "_model", lambda config: (tmp_path, 2048))
    plan = quickstart_job.quickstart_plan(config)
    assert learner_config(plan, "http://127.0.0.1:1", tmp_path).loss.echo_weight == 0.25
    plain = quickstart_job.quickstart_plan(load_config(QuickstartConfig, None, {}))
    assert learner_config(plain, "http://127.0.0.1:1", tmp_path).loss.echo_weight == 0.0
    path = tmp_path / "recipe.toml"
    path.write_text("[learner]\necho_weight = -0.5\n")
    result = invoke("--config", str(path), "--show-config")
    assert result.exit_code == 1 and "learner.echo_weight = -0.5" in " ".join(result.output.split())
