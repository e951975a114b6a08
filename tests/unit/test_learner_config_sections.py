"""The learner's config in sections: what quickstart writes and `train --show-config` prints load back."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import learner.loop
import learner.served_settings
import learner.trainer
from harnessrl.cli.app import app
from harnessrl.training.quickstart_plan import (
    FRESH_LR,
    PACKED_ROW_TOKENS,
    WARM_LR,
    QuickstartPlan,
    learner_config,
)
from harnessrl.training.warm_start import WarmStartResult
from learner.config import ConfigError, LearnerConfig, with_overrides
from learner.config_file import config_from_dict, dump_toml, load_config


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


def test_grpo_after_a_warm_start_takes_the_smaller_learning_rate_unless_one_is_given(tmp_path):
    plan = QuickstartPlan(run="qs", model_dir=tmp_path, tasks=[], database_url="sqlite+aiosqlite://")
    warm = WarmStartResult(tmp_path / "adapter", 1, 54)
    fresh = learner_config(plan, "http://127.0.0.1:8123", tmp_path / "out")
    assert fresh.optimizer.lr == FRESH_LR
    assert learner_config(plan, "http://127.0.0.1:8123", tmp_path / "out", warm).optimizer.lr == WARM_LR < FRESH_LR
    given = QuickstartPlan(run="qs", model_dir=tmp_path, tasks=[], database_url="sqlite+aiosqlite://", lr=3e-4)
    assert learner_config(given, "http://127.0.0.1:8123", tmp_path / "out", warm).optimizer.lr == 3e-4


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


def test_unknown_config_keys_are_errors_naming_the_key(tmp_path):
    path = tmp_path / "learner.toml"
    path.write_text('model_dir = "/m"\nlora_rnak = 8\n')
    with pytest.raises(ConfigError, match="unknown key 'lora_rnak'"):
        load_config(path)
    with pytest.raises(ConfigError, match="unknown key \\[lora\\] 'rnak'"):
        config_from_dict({"lora": {"rnak": 8}})
    with pytest.raises(ConfigError, match="optimizer.lr .* must be like"):
        config_from_dict({"lr": "fast"})
    with pytest.raises(ConfigError, match="scheduler = 'cosine' decays until max_steps"):
        config_from_dict({"scheduler": "cosine"})
    with pytest.raises(ConfigError, match="forward.kernel must be one of auto, sdpa, flash"):
        config_from_dict({"attn_implementation": "eager"})  # the packed path never takes a dense mask
    with pytest.raises(ConfigError, match="token_budget must not be negative"):
        config_from_dict({"token_budget": -1})


def test_the_learner_config_defaults_to_long_rows_and_the_machines_dtype():
    config = LearnerConfig()
    assert config.batch.token_budget == 0 and config.dtype == "auto" and config.batch.tree_packing
    step = config.step()
    assert step.forward.kernel == "auto" and step.forward.activation_checkpointing
    assert learner.trainer.training_dtype(config, torch.device("cuda")) == torch.bfloat16
    assert learner.trainer.training_dtype(config, torch.device("cpu")) == torch.float32


def test_the_default_config_round_trips_through_toml(tmp_path):
    path = tmp_path / "learner.toml"
    path.write_text(dump_toml(LearnerConfig()))
    assert load_config(path) == LearnerConfig()
    path.write_text("lr = 1\nlora_targets = ['q_proj']\nadam_betas = [0.9, 1]\n")
    loaded = load_config(path, max_steps=5)
    assert (
        loaded.optimizer.lr == 1.0 and loaded.lora.targets == ("q_proj",) and loaded.optimizer.adam_betas == (0.9, 1.0)
    )
    assert loaded.max_steps == 5


def test_a_sectioned_config_loads_and_the_old_flat_form_still_does_naming_the_sections(tmp_path, caplog):
    sectioned, flat = tmp_path / "sectioned.toml", tmp_path / "flat.toml"
    sectioned.write_text(
        'model_dir = "/m"\n[lora]\nrank = 8\n[optimizer]\nlr = 0.01\n'
        "[publish]\nenabled = false\n[checkpoint]\nkeep = 3\n"
    )
    flat.write_text('model_dir = "/m"\nlora_rank = 8\nlr = 0.01\npublish = false\nkeep_checkpoints = 3\n')
    with caplog.at_level(logging.WARNING, logger="learner.config"):
        assert load_config(sectioned) == load_config(flat)
    assert "lora_rank -> [lora] rank" in caplog.text and "publish -> [publish] enabled" in caplog.text
    assert str(sectioned) not in caplog.text  # only the flat file is warned about
    loaded = load_config(sectioned)
    assert (loaded.lora.rank, loaded.optimizer.lr, loaded.publish.enabled, loaded.checkpoint.keep) == (
        8,
        0.01,
        False,
        3,
    )
    assert loaded.loss == LearnerConfig().loss  # [loss] is learner.loss.LossConfig itself, its own defaults
