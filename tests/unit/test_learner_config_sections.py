"""The learner's config in sections, read and written by the one loader every job's config uses: what quickstart
writes loads back, unknown keys and wrong values are errors naming the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch

import learner.trainer
from harnessrl.config.files import ConfigError as FileError
from harnessrl.config.files import load_config, to_toml
from harnessrl.training.quickstart_plan import (
    FRESH_LR,
    PACKED_ROW_TOKENS,
    WARM_LR,
    QuickstartPlan,
    learner_config,
)
from harnessrl.training.warm_start import WarmStartResult
from learner.config import ConfigError, LearnerConfig, resolve_paths


def loaded(tmp_path: Path, text: str) -> LearnerConfig:
    path = tmp_path / "learner.toml"
    path.write_text(text)
    return load_config(LearnerConfig, path, {})


def test_quickstarts_learner_toml_loads_back_as_the_config_it_built(tmp_path):
    plan = QuickstartPlan(
        run="qs",
        model_dir=tmp_path / "model",
        tasks=[],
        database_url="sqlite+aiosqlite://",
        learner_metrics_port=9100,
        learner_overrides={"loss": {"beta": 0.01}},
    )
    warm = WarmStartResult(tmp_path / "adapter", 3, 5)
    built = learner_config(plan, "http://127.0.0.1:8123", tmp_path / "out", warm)
    assert loaded(tmp_path, to_toml(built)) == built
    written = tomllib.loads(to_toml(built))
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


def test_the_admin_key_is_a_secret_the_toml_never_holds():
    keyed = LearnerConfig().updated(publish={"admin_key": "s3cret"})
    assert keyed.publish.admin_key == "s3cret" and keyed.updated(max_steps=3).publish.admin_key == "s3cret"
    assert "s3cret" not in to_toml(keyed) and "s3cret" not in repr(keyed)
    assert "admin_key" not in tomllib.loads(to_toml(keyed))["publish"]


def test_an_update_names_what_is_unknown():
    with pytest.raises(ConfigError, match="lora.rnak"):
        LearnerConfig().updated(lora={"rnak": 4})


def test_paths_resolve_under_output_dir(tmp_path):
    resolved = resolve_paths(LearnerConfig(), Path(tmp_path))
    assert resolved.checkpoint.dir == str(tmp_path / "checkpoints")
    assert resolved.publish.adapters_dir == str(tmp_path / "adapters")
    assert resolved.tensorboard_dir == str(tmp_path / "tensorboard")


def test_the_importance_correction_is_chosen_in_the_loss_section_and_checked(tmp_path):
    truncated = LearnerConfig().updated(loss={"is_correction": "truncate"})
    assert truncated.loss.is_correction == "truncate"
    assert loaded(tmp_path, to_toml(truncated)) == truncated
    with pytest.raises(ConfigError, match="is_correction"):
        LearnerConfig().updated(loss={"is_correction": "clip"})


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('model_dir = "/m"\nlora_rnak = 8\n', "unknown key lora_rnak: the top level takes model_dir"),
        ("[lora]\nrnak = 8\n", r"unknown key lora.rnak: \[lora\] takes rank, alpha"),
        ('[optimizer]\nlr = "fast"\n', "optimizer.lr = 'fast': Input should be a valid number; write it like lr = "),
        ('[optimizer]\nscheduler = "cosine"\n', "scheduler = 'cosine' decays until max_steps"),
        ('[forward]\nkernel = "eager"\n', "forward.kernel = 'eager': Input should be 'auto', 'sdpa' or 'flash'"),
        ("[batch]\ntoken_budget = -1\n", "batch.token_budget = -1: Input should be greater than or equal to 0"),
        ("[eval]\nevery = 2\n", "eval.every needs eval.tasks"),
        ("[loss]\nis_max = 0.5\n", "loss.is_max = 0.5: Input should be greater than or equal to 1"),
    ],
)
def test_a_config_key_that_does_not_exist_or_does_not_fit_is_an_error_naming_it(tmp_path, text, said):
    with pytest.raises(FileError, match=said):
        loaded(tmp_path, text)


def test_an_old_flat_key_is_refused_naming_its_section(tmp_path):
    with pytest.raises(FileError, match=r"unknown key lora_rank: .*did you mean \[lora\] rank\?"):
        loaded(tmp_path, "lora_rank = 8\n")
    with pytest.raises(FileError, match=r"unknown key lr: .*did you mean \[optimizer\] lr\?"):
        loaded(tmp_path, "lr = 0.01\n")


def test_the_learner_config_defaults_to_long_rows_and_the_machines_dtype():
    config = LearnerConfig()
    assert config.batch.token_budget == 0 and config.dtype == "auto" and config.batch.tree_packing
    step = config.step()
    assert step.forward.kernel == "auto" and step.forward.activation_checkpointing
    assert learner.trainer.training_dtype(config, torch.device("cuda")) == torch.bfloat16
    assert learner.trainer.training_dtype(config, torch.device("cpu")) == torch.float32


def test_the_default_config_round_trips_through_toml_and_lists_become_tuples(tmp_path):
    assert loaded(tmp_path, to_toml(LearnerConfig())) == LearnerConfig()
    given = loaded(tmp_path, "[optimizer]\nlr = 1\nadam_betas = [0.9, 1]\n[lora]\ntargets = ['q_proj']\n")
    assert (given.optimizer.lr, given.lora.targets, given.optimizer.adam_betas) == (1.0, ("q_proj",), (0.9, 1.0))
    assert given.loss == LearnerConfig().loss  # [loss] is learner.step_settings.LossConfig itself, its defaults
