"""Policy names and capture modes are typed when a config is read (``PolicyName``, ``CaptureMode``): --show-config
of every config holding one refuses a bad one, from the command line or a file, naming the key and the rule."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app

BAD_POLICY = "Pi-v2"
REQUIRED = {"run": ["--tasks", "x", "--run", "r"], "eval": [], "quickstart": [], "train": []}


def told(*args: str, file_text: str | None = None, tmp_path=None):
    if file_text is not None:
        (tmp_path / "job.toml").write_text(file_text)
        args = (*args, "--config", str(tmp_path / "job.toml"))
    result = CliRunner().invoke(app, [*args, "--show-config"], env={"COLUMNS": "300"})
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))


@pytest.mark.parametrize(
    ("command", "flag", "key"),
    [("run", "--policy", "policy"), ("eval", "--policy", "policy"), ("quickstart", "--policy", "policy"),
     ("train", "--policy", "policies")],
)  # fmt: skip
def test_a_bad_policy_name_is_refused_naming_the_key_and_the_rule(command, flag, key, tmp_path):
    code, said = told(command, *REQUIRED[command], flag, BAD_POLICY)
    assert code == 1 and "the command line: " + key in said and f"'{BAD_POLICY}' is not a policy name" in said
    assert "lower-case letters" in said and "Traceback" not in said
    in_a_file = f'{key} = "{BAD_POLICY}"\n' if key == "policy" else f'{key} = ["{BAD_POLICY}"]\n'
    code, said = told(command, *REQUIRED[command], file_text=in_a_file, tmp_path=tmp_path)
    assert code == 1 and f"job.toml: {key} = " in said and f"'{BAD_POLICY}' is not a policy name" in said


@pytest.mark.parametrize("command", ["run", "eval", "quickstart"])
def test_a_good_policy_name_is_kept(command):
    code, said = told(command, *REQUIRED[command], "--policy", "pi")
    assert code == 0 and 'policy = "pi"' in said


def test_a_trained_policys_table_is_named_too(tmp_path):
    code, said = told("train", file_text="[policies.Alpha]\n", tmp_path=tmp_path)
    assert code == 1 and "job.toml: policies = " in said and "'Alpha' is not a policy name" in said


@pytest.mark.parametrize("command", ["run", "quickstart"])
def test_a_bad_capture_mode_is_refused_naming_the_key_and_the_modes(command, tmp_path):
    code, said = told(command, *REQUIRED[command], "--capture", "tokens")
    assert code == 2 and "Invalid value for '--capture'" in said and "'engine', 'tito'" in said
    code, said = told(command, *REQUIRED[command], file_text='capture = "tokens"\n', tmp_path=tmp_path)
    assert code == 1 and "job.toml: capture = 'tokens': Input should be 'engine' or 'tito'" in said
    code, said = told(command, *REQUIRED[command], "--capture", "tito")
    assert code == 0 and 'capture = "tito"' in said
