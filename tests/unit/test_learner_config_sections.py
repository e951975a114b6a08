"""The learner's config in sections: what quickstart writes and `train --show-config` prints load back."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.training.quickstart_plan import PACKED_ROW_TOKENS, QuickstartPlan, learner_config
from harnessrl.training.warm_start import WarmStartResult
from learner.config import ConfigError, LearnerConfig, with_overrides
from learner.config_file import config_from_dict, dump_toml


def test_quickstarts_learner_toml_loads_back_as_the_config_it_built(tmp_path):
    plan = QuickstartPlan(
        run="qs",
        model_dir=tmp_path / "model",
        tasks=[],
        database_url="sqlite+aiosqlite://",
        learner_metrics_port=9100,
        learner={"beta": 0.01},
    )
    warm = WarmStartResult(tmp_path / "adapter", 3, 5)
    built = learner_config(plan, "http://127.0.0.1:8123", tmp_path / "out", warm)
    written = tomllib.loads(dump_toml(built))
    assert config_from_dict(written) == built
    assert written["publish"]["gateway_url"] == "http://127.0.0.1:8123" and written["metrics_port"] == 9100
    assert written["lora"]["init_version"] == 3 and written["loss"]["beta"] == 0.01
    # rows hold at least 8k tokens, so an agent's groups pack as trees sharing their long first prompt
    assert written["batch"]["token_budget"] == PACKED_ROW_TOKENS > plan.max_model_len


def test_show_config_prints_sections_without_the_admin_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = tmp_path / "learner.toml"
    config.write_text(
        dump_toml(with_overrides(LearnerConfig(model_dir=str(model)), lora_rank=8, admin_key="s3cret"), secrets=True)
    )
    result = CliRunner().invoke(app, ["train", "--run", "r", "--config", str(config), "--show-config"])
    assert result.exit_code == 0, result.output
    shown = tomllib.loads(result.stdout)
    assert shown["lora"]["rank"] == 8 and shown["publish"]["admin_key"] == "" and "s3cret" not in result.stdout
    assert set(shown) >= {"lora", "optimizer", "loss", "forward", "batch", "publish", "checkpoint", "eval"}


def test_an_override_names_what_is_unknown():
    try:
        with_overrides(LearnerConfig(), lora_rnak=4)
    except ValueError as exc:
        assert "lora_rnak" in str(exc) and "lora_rank" in str(exc)
    else:
        raise AssertionError("an unknown override was accepted")


def test_paths_resolve_under_output_dir(tmp_path):
    from learner.config import resolve_paths

    resolved = resolve_paths(LearnerConfig(), Path(tmp_path))
    assert resolved.checkpoint.dir == str(tmp_path / "checkpoints")
    assert resolved.publish.adapters_dir == str(tmp_path / "adapters")
    assert resolved.tensorboard_dir == str(tmp_path / "tensorboard")


def test_the_importance_correction_is_chosen_in_the_loss_section_and_checked():
    truncated = with_overrides(LearnerConfig(), is_correction="truncate")
    assert truncated.loss.is_correction == "truncate"
    assert tomllib.loads(dump_toml(truncated))["loss"]["is_correction"] == "truncate"
    assert config_from_dict(tomllib.loads(dump_toml(truncated))) == truncated
    with pytest.raises(ConfigError, match="is_correction"):
        with_overrides(LearnerConfig(), is_correction="clip")
