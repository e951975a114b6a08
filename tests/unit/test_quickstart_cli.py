"""`harnessrl quickstart` refuses what cannot run before it starts an engine, naming the fix."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.training.quickstart_plan import agent_context


def quickstart(tmp_path, *args: str):
    return CliRunner().invoke(
        app,
        ["quickstart", "--admin-key", "k", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/db.sqlite", *args],
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--harness", "aider"], "unknown harness 'aider': choose builtin or one of opencode, pi"),
        (["--warm-start", "--upstream", "solutions"], "add --harness pi"),
        (["--tasks", "builtin:shell", "--unseen-tasks", "builtin:shell-unseen"], "add --eval-every N"),
        (["--eval-every", "2", "--unseen-tasks", "builtin:nope"], "unknown built-in dataset 'builtin:nope'"),
    ],
)
def test_quickstart_refuses_a_plan_that_cannot_run(tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    result = quickstart(tmp_path, *args)
    assert result.exit_code == 1, result.output
    assert message in " ".join(result.output.split()), result.output


def test_a_missing_agent_is_named_with_its_install_command_before_any_engine_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no pi, no node
    result = quickstart(tmp_path, "--harness", "pi", "--tasks", "builtin:shell", "--model", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "pi not found: npm install -g @mariozechner/pi-coding-agent@" in " ".join(result.output.split())
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("engine-*.log"))


@pytest.mark.parametrize("harness", ["pi", "opencode", "hermes", "claude-code", "codex"])
def test_an_agents_engine_context_holds_its_first_prompt_and_two_answers(harness):
    from harnesses.agents import AGENTS

    context = agent_context(harness, call_max_tokens=256)
    assert context % 1024 == 0 and context >= AGENTS[harness].first_prompt_tokens + 512 + 1024
    assert context < AGENTS[harness].first_prompt_tokens + 512 + 2048  # no more than the next KiB
    assert agent_context("builtin", 256) == 2048
