"""`harnessrl run`'s outcome: a summary line, or a failure naming the first error when no rollout finished."""

import pytest
from typer.testing import CliRunner

import rollouts.launch
from harnessrl.cli.app import app
from rollouts.launch import EveryRolloutFailed, outcome
from rollouts.run_plan import RolloutResult


def result(index: int, status: str, reward: float | None = None, error: str | None = None) -> RolloutResult:
    return RolloutResult(task="t", index=index, rollout_id=index + 1, status=status, reward=reward, error=error)


def test_a_run_whose_every_rollout_failed_fails_naming_the_first_error():
    results = [result(0, "failed", error="sandbox start: crun refused"), result(1, "failed", error="other")]
    with pytest.raises(EveryRolloutFailed) as failed:
        outcome("r", results)
    message = str(failed.value)
    assert "2 rollouts this time (0 finished, 2 failed)" in message
    assert message.endswith("every rollout failed; the first: sandbox start: crun refused")


def test_a_run_with_one_finished_rollout_succeeds_with_its_summary():
    results = [result(0, "failed", error="boom"), result(1, "finished", reward=0.0)]
    assert outcome("r", results).startswith("run 'r': 2 rollouts this time (1 finished, 1 failed)")


def test_a_run_with_nothing_left_to_play_succeeds():
    assert outcome("r", []).startswith("run 'r': 0 rollouts this time")


def test_harnessrl_run_exits_non_zero_naming_the_first_error_when_every_rollout_failed(monkeypatch):
    async def launch_run(config, gateway_url, admin_key, on_ready=None):
        failed = [result(0, "failed", error="sandbox start: crun refused"), result(1, "failed", error="other")]
        return outcome(config.run, failed)

    monkeypatch.setattr(rollouts.launch, "launch_run", launch_run)
    ran = CliRunner().invoke(
        app,
        ["run", "--tasks", "builtin:shell", "--run", "all-failed", "--admin-key", "k"],
        env={"COLUMNS": "300"},
    )
    assert ran.exit_code == 1, ran.output
    assert "every rollout failed; the first: sandbox start: crun refused" in ran.output
    assert "Traceback" not in ran.output
