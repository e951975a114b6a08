"""`harnessrl train`'s config (harnessrl.config.train.TrainConfig): the learner's settings and the job's keys on
the machinery of every job's config: an option per key, --config FILE, --show-config, and policies as a list
of names or a table of their own learner keys over the shared ones."""

from __future__ import annotations

import tomllib

from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.config.files import load_config
from harnessrl.config.train import TrainConfig

OPTIONS = [
    "--run",
    "a",
    "--run",
    "b",
    "--policy",
    "p",
    "--max-steps",
    "5",
    "--lora-rank",
    "8",
    "--lora-targets",
    "q_proj",
    "--optimizer-lr",
    "1e-5",
    "--optimizer-adam-betas",
    "0.8",
    "0.9",
    "--checkpoint-every",
    "3",
    "--eval-every",
    "2",
    "--eval-tasks",
    "builtin:arithmetic",
    "--loss-is-max",
    "4",
    "--database-url",
    "sqlite:///x.db",
    "--metrics-port",
    "9101",
]


def train(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, ["train", *args], env=env)


def told(result) -> str:
    """The command's output on one line (the console wraps long messages)."""
    return " ".join(result.output.split())


def shown(*args: str, env: dict | None = None) -> str:
    result = train(*args, "--show-config", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_show_config_prints_every_key_and_reads_back_to_the_same_config(tmp_path):
    printed = shown(*OPTIONS)
    path = tmp_path / "train.toml"
    path.write_text(printed)
    config = load_config(TrainConfig, path, {})
    assert shown("--config", str(path)) == printed
    assert config.runs == ["a", "b"] and config.policies == ["p"] and config.max_steps == 5
    assert (config.lora.rank, config.lora.targets, config.optimizer.lr) == (8, ("q_proj",), 1e-5)
    assert (config.optimizer.adam_betas, config.checkpoint.every, config.eval.every) == ((0.8, 0.9), 3, 2)
    assert config.store.url == "sqlite:///x.db" and config.loss.is_max == 4.0 and config.metrics_port == 9101
    values = tomllib.loads(printed)
    for name, field in TrainConfig.model_fields.items():  # every key, its section's too (settings_dir: unset)
        section = getattr(field.annotation, "model_fields", None)
        assert name in values or f"# {name}: not set" in printed
        assert section is None or set(values[name]) | {"admin_key", "url"} >= set(section)


def test_a_file_plus_options_is_the_options_alone(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('runs = ["old"]\nmax_steps = 5\n[lora]\nrank = 4\nalpha = 64\n[optimizer]\nlr = 0.5\n')
    over = shown("--config", str(path), "--run", "a", "--lora-rank", "8", "--optimizer-lr", "1e-5")
    alone = shown("--run", "a", "--max-steps", "5", "--lora-rank", "8", "--lora-alpha", "64", "--optimizer-lr", "1e-5")
    assert over == alone


def test_an_unknown_key_is_an_error_naming_it_at_the_top_in_a_section_and_in_a_policys_table(tmp_path):
    path = tmp_path / "train.toml"
    for text, said in (
        ("lora_rnak = 8\n", "unknown key lora_rnak"),
        ("[lora]\nrnak = 8\n", "unknown key lora.rnak"),
        ("[policies.alpha.optimizer]\nlrr = 1e-5\n", "unknown key policies.alpha.optimizer.lrr"),
        ("[policies.alpha]\nmax_step = 1\n", "unknown key policies.alpha.max_step"),
    ):
        path.write_text(text)
        result = train("--run", "a", "--config", str(path))
        assert result.exit_code == 1 and said in told(result), (text, result.output)
        assert str(path) in told(result)


def test_a_wrong_type_names_the_key_and_where_it_came_from(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[lora]\nrank = "8"\n')
    result = train("--config", str(path))
    assert result.exit_code == 1 and f"{path}: lora.rank = '8': Input should be a valid integer" in told(result)
    result = train("--optimizer-scheduler", "cosine")
    assert result.exit_code == 1 and "the command line: optimizer.scheduler = 'cosine' decays until max_steps" in told(
        result
    )


def test_policies_as_a_list_or_a_table_whose_keys_reach_only_that_policy(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text(
        "[optimizer]\nlr = 1e-4\n[policies.alpha.optimizer]\nlr = 1e-5\n[policies.alpha]\nmax_steps = 2\n[policies.bob]\n"
    )
    config = load_config(TrainConfig, path, {})
    assert config.policy_names() == ["alpha", "bob"]
    alpha, bob, shared = (config.policy_settings(name) for name in ("alpha", "bob", None))
    assert (alpha.optimizer.lr, alpha.max_steps, alpha.optimizer.weight_decay) == (1e-5, 2, 0.0)
    assert (bob.optimizer.lr, bob.max_steps) == (shared.optimizer.lr, shared.max_steps) == (1e-4, 0)
    assert load_config(TrainConfig, path, {"policies": ["x"]}).policy_settings("x") == shared  # the option: names
    printed = shown("--config", str(path))
    assert "[policies.alpha.optimizer]" in printed and tomllib.loads(printed)["policies"]["alpha"]["max_steps"] == 2
    listed = tmp_path / "listed.toml"
    listed.write_text('policies = ["alpha", "bob"]\n')
    assert load_config(TrainConfig, listed, {}).policy_settings("alpha") == shared


def test_the_admin_key_comes_from_its_option_or_variable_and_is_never_printed(tmp_path):
    from harnessrl.cli import train_policies

    seen = []
    printed = shown("--admin-key", "s3cret")
    assert "s3cret" not in printed and "admin_key" not in printed
    original = train_policies.start_policies
    try:
        train_policies.start_policies = seen.append
        assert train("--policy", "p", env={"HARNESSRL_ADMIN_KEY": "from-env"}).exit_code == 0
        assert train("--policy", "p", "--admin-key", "given").exit_code == 0
    finally:
        train_policies.start_policies = original
    assert [config.publish.admin_key for config in seen] == ["from-env", "given"]


def test_nothing_named_to_train_says_how_to_name_it():
    result = train()
    assert result.exit_code == 1 and "--run RUN (repeatable) or --policy NAME" in told(result)


def test_sft_reads_its_learner_settings_with_the_same_loader(tmp_path):
    path = tmp_path / "learner.toml"
    path.write_text("[lora]\nrnak = 8\n")
    result = CliRunner().invoke(app, ["sft", "--run", "r", "--learner-config", str(path)])
    assert result.exit_code == 1 and "unknown key lora.rnak" in told(result)
    result = CliRunner().invoke(app, ["sft", "--run", "r", "--lr", "-1"])
    assert result.exit_code == 1 and "optimizer.lr = -1.0" in told(result)


def test_a_negative_or_non_finite_echo_weight_is_an_error_naming_the_key(tmp_path):
    path = tmp_path / "train.toml"
    for value in ("-1.0", "nan", "inf"):
        path.write_text(f"[loss]\necho_weight = {value}\n")
        result = train("--config", str(path))
        assert result.exit_code != 0 and f"{path}: loss.echo_weight = " in told(result), told(result)
    result = train("--loss-echo-weight", "-1")
    assert result.exit_code != 0 and "--loss-echo-weight" in told(result)
    result = train("--loss-echo-weight", "inf")
    assert result.exit_code != 0 and "loss.echo_weight = inf: Input should be a finite number" in told(result)
    assert "echo_weight = 0.5" in shown("--run", "a", "--loss-echo-weight", "0.5")
