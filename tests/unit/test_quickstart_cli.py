"""`harnessrl quickstart` refuses what cannot run before it starts an engine, naming the fix."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.training.quickstart_plan import agent_context, engine_context


def quickstart(tmp_path, *args: str):
    return CliRunner().invoke(
        app,
        ["quickstart", "--admin-key", "k", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/db.sqlite", *args],
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--harness", "aider"], "unknown harness 'aider': choose builtin or one of opencode, pi"),
        (["--task-sampling", "hardest"], "--task-sampling hardest: choose pass or learnable"),
        (["--warm-start", "--upstream", "solutions"], "add --harness pi"),
        (["--tasks", "builtin:shell", "--unseen-tasks", "builtin:shell-unseen"], "add --eval-every N"),
        (["--eval-every", "2", "--unseen-tasks", "builtin:nope"], "unknown built-in dataset 'builtin:nope'"),
        (["--learner-folder", "shared"], "--learner-folder hands the run to a server's learner: add --gateway URL"),
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
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 8192}')
    result = quickstart(tmp_path, "--harness", "pi", "--tasks", "builtin:shell", "--model", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "pi not found: npm install -g @mariozechner/pi-coding-agent@" in " ".join(result.output.split())
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("engine-*.log"))


@pytest.mark.parametrize("harness", ["pi", "opencode", "hermes", "claude-code", "codex", "qwen-code"])
def test_an_agents_engine_context_holds_its_first_prompt_and_two_answers(harness):
    from harnesses.agents import AGENTS

    context = agent_context(harness, call_max_tokens=256)
    assert context % 1024 == 0 and context >= AGENTS[harness].first_prompt_tokens + 512 + 1024
    assert context < AGENTS[harness].first_prompt_tokens + 512 + 2048  # no more than the next KiB
    assert agent_context("builtin", 256) == 2048


def test_an_agents_engine_context_is_cut_to_the_models_positions_while_its_first_prompt_fits():
    # OpenCode's ~7.7k-token first prompt wants 9,216 with two 128-token answers; SmolLM2 has 8,192 positions.
    assert agent_context("opencode", 128) > 8192
    assert engine_context("opencode", 128, model_max=8192) == 8192
    assert engine_context("pi", 128, model_max=8192) == agent_context("pi", 128)
    assert engine_context("opencode", 128, model_max=32768, asked=12288) == 12288


def test_a_model_too_short_for_the_agent_is_refused_naming_a_longer_context(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 8192}')
    result = quickstart(tmp_path, "--harness", "hermes", "--tasks", "builtin:shell", "--model", str(tmp_path))
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "hermes's first prompt" in said and "the model has 8192 positions" in said, said
    assert "models prepare --context" in said
    result = quickstart(tmp_path, "--harness", "pi", "--max-model-len", "9000", "--model", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "past the model's 8192 positions" in " ".join(result.output.split())


def test_the_default_model_is_stretched_only_for_agents_whose_prompt_passes_its_positions(tmp_path, monkeypatch):
    from harnessrl.engine import model_prep
    from harnessrl.engine.process import model_max_len
    from harnessrl.training.quickstart_plan import default_model

    base = model_prep.build_tiny_model(tmp_path / "smollm2", max_position_embeddings=8192)
    monkeypatch.setattr(model_prep, "prepare_smollm2", lambda: base)
    assert default_model("pi", 128) == base and default_model("opencode", 128) == base
    hermes = default_model("hermes", 128)
    assert hermes != base and model_max_len(hermes) == agent_context("hermes", 128)
    assert engine_context("hermes", 128, model_max_len(hermes)) == agent_context("hermes", 128)


@pytest.mark.parametrize(("args", "sampling"), [([], "pass"), (["--task-sampling", "learnable"], "learnable")])
def test_the_task_sampling_reaches_the_rounds_plan(tmp_path, monkeypatch, args, sampling):
    from harnessrl.training.quickstart import Quickstart

    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 8192}')
    plans = []
    monkeypatch.setattr(
        Quickstart, "run", lambda self, gateway=None: plans.append(self.plan) or (tmp_path / "curve.png", None)
    )
    result = quickstart(tmp_path, "--model", str(tmp_path), *args)
    assert result.exit_code == 0, result.output
    assert [plan.task_sampling for plan in plans] == [sampling]
