"""The judge's keys (harnessrl.config.sections.JudgeConfig), declared once, are options of every job that
takes a judge; eval judges each rollout alone, so its judge mode is a key with one value and no option."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.config.sections import JudgeConfig

JUDGE_FLAGS = ["--judge", "openai/m", "--rubric", "r.txt", "--judge-concurrency", "2", "--judge-timeout", "5"]
JOBS = (["run", "--tasks", "builtin:arithmetic", "--run", "r"], ["eval"], ["quickstart"])


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.mark.parametrize("command", JOBS)
def test_every_job_takes_the_judge_flags_into_its_judge_section(command):
    result = invoke(*command, *JUDGE_FLAGS, "--show-config")
    assert result.exit_code == 0, result.output
    judge = tomllib.loads(result.stdout)["judge"]
    assert JudgeConfig(**{**judge, "rubric": Path(judge["rubric"])}) == JudgeConfig(
        model="openai/m", rubric=Path("r.txt"), mode="rollout", concurrency=2, timeout_s=5.0
    )


def test_run_and_quickstart_take_a_judge_mode_and_eval_has_none():
    for command in (JOBS[0], JOBS[2]):
        shown = invoke(*command, "--judge-mode", "group", "--show-config")
        assert tomllib.loads(shown.stdout)["judge"]["mode"] == "group", shown.output
    refused = invoke("eval", "--judge-mode", "group")
    assert refused.exit_code == 2 and "No such option: --judge-mode" in refused.output


def test_judge_options_name_the_missing_flag():
    assert "needs --rubric" in _message(lambda: JudgeConfig(model="openai/m").settings())
    assert "needs --judge" in _message(lambda: JudgeConfig(rubric=Path("r.txt")).settings())
    assert JudgeConfig().settings() is None


def test_run_eval_and_quickstart_refuse_a_judge_without_a_rubric(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    database = f"sqlite+aiosqlite:///{tmp_path}/db.sqlite"
    for command in JOBS:
        result = invoke(*command, "--admin-key", "k", "--judge", "openai/m", "--database-url", database)
        assert result.exit_code == 1, (command, result.output)
        assert "--judge needs --rubric" in result.output, (command, result.output)


def _message(call) -> str:
    try:
        call()
    except ValueError as exc:
        return str(exc)
    raise AssertionError("no ValueError")
