"""The --judge options, declared once (harnessrl.cli.judge_options), reach every command that takes them."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.cli.judge_options import NO_JUDGE, JudgeOptions, judge_options


def decorated_app(modes: bool) -> tuple[typer.Typer, list[JudgeOptions]]:
    seen: list[JudgeOptions] = []
    demo = typer.Typer()

    @demo.command()
    @judge_options(modes=modes)
    def go(name: str, judge: JudgeOptions = NO_JUDGE) -> None:
        seen.append(judge)

    return demo, seen


def test_a_decorated_command_receives_the_judge_flags_as_one_options_object(tmp_path):
    demo, seen = decorated_app(modes=True)
    result = CliRunner().invoke(
        demo,
        [
            "x",
            "--judge",
            "openai/m",
            "--rubric",
            str(tmp_path / "r.txt"),
            "--judge-mode",
            "group",
            "--judge-concurrency",
            "2",
            "--judge-timeout",
            "5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen == [
        JudgeOptions(model="openai/m", rubric=tmp_path / "r.txt", mode="group", concurrency=2, timeout_s=5.0)
    ]


def test_without_modes_there_is_no_judge_mode_flag_and_rollouts_are_judged_alone():
    demo, seen = decorated_app(modes=False)
    assert CliRunner().invoke(demo, ["x", "--judge-mode", "group"]).exit_code != 0
    assert CliRunner().invoke(demo, ["x"]).exit_code == 0
    assert seen == [NO_JUDGE] and seen[0].mode == "rollout"


def test_judge_options_name_the_missing_flag(tmp_path):
    assert "needs --rubric" in _message(lambda: JudgeOptions(model="openai/m").settings())
    assert "needs --judge" in _message(lambda: JudgeOptions(rubric=Path("r.txt")).settings())
    assert JudgeOptions().settings() is None


def test_run_eval_and_quickstart_refuse_a_judge_without_a_rubric(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    for command in (["run", "--tasks", "builtin:arithmetic", "--run", "r"], ["eval"], ["quickstart"]):
        result = CliRunner().invoke(
            app,
            [
                *command,
                "--admin-key",
                "k",
                "--judge",
                "openai/m",
                "--database-url",
                f"sqlite+aiosqlite:///{tmp_path}/db.sqlite",
            ],
        )
        assert result.exit_code == 1, (command, result.output)
        assert "--judge needs --rubric" in result.output, (command, result.output)


def _message(call) -> str:
    try:
        call()
    except ValueError as exc:
        return str(exc)
    raise AssertionError("no ValueError")
