"""A run is data: `harnessrl run` and `harnessrl eval` read a TOML file (--config), take command-line options
over it, print it back whole (--show-config) and keep it with the run; a bad file is a CLI error naming the
file, the key and the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import harnessrl.evaluation.evaluate
import rollouts.launch
from harnessrl.cli.app import app
from harnessrl.cli.job_config import option_keys
from harnessrl.cli.jobs import run_config_path
from harnessrl.cli.rollouts import eval_policies, run_rollouts
from harnessrl.config.files import ConfigError, load_config
from harnessrl.config.jobs import EvalConfig, RunConfig
from tests.builders import run_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
UNISOLATED = [] if shutil.which("bwrap") else ["--allow-unisolated"]


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300", **(env or {})})


def leaves(model, prefix: str = "") -> set[str]:
    """Every key of a config, dotted (``sandbox.kind``)."""
    found = set()
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
            found |= leaves(field.annotation, f"{prefix}{name}.")
        else:
            found.add(prefix + name)
    return found


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    monkeypatch.delenv("HARNESSRL_GATEWAY", raising=False)


def test_the_examples_load():
    run = load_config(RunConfig, EXAMPLES / "run.toml", {})
    assert (run.run, run.harness, run.tasks.source, run.tasks.split, run.capture) == (
        "pi-shell",
        "pi",
        "builtin:shell",
        "train",
        "tito",
    )
    evaluation = load_config(EvalConfig, EXAMPLES / "eval.toml", {})
    assert (evaluation.policies, evaluation.k, evaluation.tasks.split) == (["base", "pi@latest"], 4, "test")


def test_a_file_gives_the_keys_it_names_and_the_rest_are_the_defaults(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('run = "r"\n[tasks]\nsource = "builtin:shell"\n[sandbox]\nmemory_gib = 4\n')
    config = load_config(RunConfig, path, {})
    assert config == run_config("builtin:shell", "r", **{"sandbox.memory_gib": 4.0})
    assert (config.group_size, config.sandbox.kind.name, config.sandbox.memory_gib) == (4, "local", 4.0)


def test_an_option_on_the_command_line_wins_over_the_file_and_an_unset_one_leaves_it(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('run = "r"\ngroup_size = 2\nconcurrency = 3\n[tasks]\nsource = "builtin:shell"\n')
    shown = invoke("run", "--config", str(path), "--group-size", "5", "--run", "other", "--show-config")
    assert shown.exit_code == 0, shown.output
    (tmp_path / "shown.toml").write_text(shown.stdout)
    config = load_config(RunConfig, tmp_path / "shown.toml", {})
    assert (config.run, config.group_size, config.concurrency) == ("other", 5, 3)


def test_an_options_environment_variable_wins_over_the_file_too(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('run = "r"\n[tasks]\nsource = "x"\n[gateway]\nurl = "http://file:1"\n')
    shown = invoke("run", "--config", str(path), "--show-config", env={"HARNESSRL_GATEWAY": "http://env:2"})
    assert 'url = "http://env:2"' in shown.stdout


@pytest.mark.parametrize(
    ("command", "model", "keys"),
    [
        (
            ["run", "--tasks", "x", "--run", "r", "--sandbox-option", "image_registry=reg", "--judge", "m"],
            RunConfig,
            {"tasks.source": "x", "run": "r", "sandbox.options": {"image_registry": "reg"}, "judge.model": "m"},
        ),
        (
            ["eval", "--policies", "base,pi@v3", "-k", "2", "--temperature", "0", "--out", "somewhere"],
            EvalConfig,
            {"policies": ["base", "pi@v3"], "k": 2, "sampling.temperature": 0.0, "out": "somewhere"},
        ),
    ],
)
def test_show_config_prints_every_key_and_reading_it_back_gives_the_same_config(tmp_path, command, model, keys):
    shown = invoke(*command, "--show-config")
    assert shown.exit_code == 0, shown.output
    (tmp_path / "shown.toml").write_text(shown.stdout)
    assert load_config(model, tmp_path / "shown.toml", {}) == load_config(model, None, keys)
    assert leaves(model) - {"gateway.admin_key"} <= set(named_keys(shown.stdout))  # unset ones as comments
    again = invoke(command[0], "--config", str(tmp_path / "shown.toml"), "--show-config")
    assert again.stdout == shown.stdout


def named_keys(toml: str) -> list[str]:
    """Each key the TOML names (set, commented as unset, or a table), dotted by its table."""
    table, found = "", []
    for line in toml.splitlines():
        if line.startswith("["):
            table = line.strip("[]") + "."
            found.append(table.rstrip("."))
        elif " = " in line or line.startswith("# "):
            found.append(table + line.removeprefix("# ").split(" = ")[0].split(":")[0])
    return found


def test_an_unknown_key_is_refused_naming_the_file_the_key_and_what_the_table_takes(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('run = "r"\n[tasks]\nsource = "x"\n[sandbox]\nmemroy_gib = 4\n')
    result = invoke("run", "--config", str(path))
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{path}: unknown key sandbox.memroy_gib: [sandbox] takes kind, options, memory_gib" in message
    assert "fix its spelling or remove it" in message


def test_a_wrong_type_is_refused_naming_the_key_and_how_to_write_it(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('run = "r"\ngroup_size = "4"\n[tasks]\nsource = "x"\n')
    result = invoke("run", "--config", str(path))
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{path}: group_size = '4': Input should be a valid integer; write it like group_size = 4" in message


def test_a_bad_file_names_itself_and_a_missing_key_names_its_option(tmp_path):
    (tmp_path / "broken.toml").write_text('run = "r\n')
    assert "broken.toml is not valid TOML" in invoke("run", "--config", str(tmp_path / "broken.toml")).output
    assert "does not exist" in invoke("run", "--config", str(tmp_path / "none.toml")).output
    (tmp_path / "partial.toml").write_text('run = "r"\n')
    missing = " ".join(invoke("run", "--config", str(tmp_path / "partial.toml")).output.split())
    assert "partial.toml: missing key tasks.source: set it there or give --tasks" in missing
    bare = invoke("run")
    assert bare.exit_code == 2 and "Missing option '--tasks'" in bare.output  # as click said it before


def test_a_value_out_of_range_in_a_file_is_refused_as_the_option_is():
    with pytest.raises(ConfigError, match="group_size = 0: Input should be greater than or equal to 1"):
        run_config("x", "r", group_size=0)


def test_every_key_of_run_and_eval_is_an_option_and_every_option_a_key():
    fixed = {"judge.mode"}  # eval judges each rollout on its own: a key with one value, no option
    for command, model, unset in ((run_rollouts, RunConfig, set()), (eval_policies, EvalConfig, fixed)):
        keys = {sets.key for sets in option_keys(command).values()}
        assert keys == leaves(model) - unset, command.__name__


def test_a_run_keeps_its_config_once_its_checks_pass(monkeypatch):
    seen = {}

    async def launch_run(config, gateway_url, admin_key, on_ready=None):
        seen["config"] = config
        on_ready()
        return "done"

    monkeypatch.setattr(rollouts.launch, "launch_run", launch_run)
    result = invoke("run", "--tasks", "builtin:shell", "--run", "kept", "--admin-key", "k", "--top-p", "0.9")
    assert result.exit_code == 0, result.output
    kept = load_config(RunConfig, run_config_path("kept"), {})
    assert kept == seen["config"].model_copy(update={"gateway": kept.gateway})  # the admin key is never kept
    assert (kept.policy, kept.sampling.top_p, kept.gateway.admin_key) == ("builtin", 0.9, None)


def test_an_evaluation_keeps_its_config_beside_eval_json(tmp_path, monkeypatch):
    def evaluate(plan, gateway_url, admin_key, out_dir, console):
        return {"files": {"json": str(out_dir / "eval.json"), "png": str(out_dir / "eval.png")}}

    monkeypatch.setattr(harnessrl.evaluation.evaluate, "evaluate", evaluate)
    result = invoke("eval", "--run", "ev", "--admin-key", "k", "-k", "2", "--out", str(tmp_path / "ev"), *UNISOLATED)
    assert result.exit_code == 0, result.output
    kept = load_config(EvalConfig, tmp_path / "ev" / "eval.toml", {})
    assert (kept.run, kept.k, kept.policy, kept.out) == ("ev", 2, "policy", tmp_path / "ev")
