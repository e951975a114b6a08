"""The learner's settings: one frozen dataclass, read from a flat TOML file (`harnessrl train --config`).

Every key is optional; the defaults below are the documented ones (``harnessrl train --show-config``
prints them as TOML). A key the dataclass does not know is an error that names it, so a typo
(``lora_rnak``) never silently trains with a default.

Paths left empty are derived from ``output_dir`` (see ``resolve_paths``), which the CLI defaults to
``$HARNESSRL_HOME/learner/<run>``; the learner never reads environment variables itself.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from learner.attention import KERNELS
from learner.forward import ForwardConfig
from learner.loss import LossConfig
from learner.step import StepConfig

SCHEDULERS = ("constant", "linear", "cosine")
DTYPES = ("auto", "float32", "bfloat16", "float16")
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A config file or value the learner cannot use; the message names the key."""


@dataclass(frozen=True)
class LearnerConfig:
    # --- model and adapter -------------------------------------------------------------------
    model_dir: str = ""  # Hugging Face folder of the base model the engine serves (required)
    # training dtype of the base weights: auto = bfloat16 on CUDA, float32 on CPU (LoRA weights stay float32)
    dtype: str = "auto"
    device: str = "auto"  # auto: cuda:<LOCAL_RANK> when CUDA is available, else cpu
    # packed attention kernel (learner.attention): auto = flash varlen on CUDA with flash_attn installed, else sdpa
    attn_implementation: str = "auto"
    lora_rank: int = 16  # must not exceed the engine's --max-lora-rank (serve's default 16)
    lora_alpha: int = 32
    lora_dropout: float = 0.0  # 0 keeps the learner's log-probs those of the policy the engine sampled
    lora_targets: tuple[str, ...] = ALL_LINEAR  # module names LoRA wraps (vLLM supports all of these)
    seed: int = 0  # LoRA initialisation; a resumed run loads its weights instead
    # a peft adapter folder to start from (e.g. `harnessrl sft`'s warm start) instead of a fresh LoRA;
    # its own rank and targets apply. "": fresh. A resumed run loads its checkpoint either way.
    init_adapter: str = ""
    # the policy version init_adapter is already served as (sft --publish): the learner starts there and
    # publishes init_version + 1 next, instead of refusing a gateway "newer" than it. 0: unpublished
    init_version: int = 0
    # --- optimizer and schedule --------------------------------------------------------------
    lr: float = 1e-4  # AdamW peak learning rate (LoRA wants ~10x the full fine-tuning rate)
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = 1.0  # global L2 clip of the LoRA gradients; <= 0 disables clipping
    warmup_steps: int = 0  # linear warm-up from 0 to lr over this many optimizer steps
    scheduler: str = "constant"  # after warm-up: constant | linear | cosine (decay to min_lr_ratio * lr by max_steps)
    min_lr_ratio: float = 0.0
    # --- batches -----------------------------------------------------------------------------
    groups_per_step: int = 4  # ready groups per optimizer step (the step waits until that many are ready)
    # Tokens per packed row, i.e. per micro-batch: gradients accumulate over every row of a step.
    # A sample longer than this is refused (counted), never truncated. 0: the engine's max model length
    # (read from the gateway's GET /v1/models at start; 32768 when no gateway says it).
    token_budget: int = 0
    tree_packing: bool = True  # samples sharing a prefix (a group's prompt) forward it once (learner.packing)
    min_saved_tokens: int = 128  # a tree saving fewer tokens than this is packed flat
    activation_checkpointing: bool = True  # recompute layer activations in the backward for long rows
    # rows at least this long are checkpointed; 0 = every row (measured on SmolLM2: one 1k-token row needs
    # +1.0 GB checkpointed, +2.3 GB not)
    checkpoint_min_tokens: int = 1024
    chunk_tokens: int = 512  # positions per chunk of the output layer (chunk_tokens x vocab logits at once)
    include_side: bool = False  # also train on side calls (titles, summaries)
    temperature: float = 1.0  # the sampler's temperature, so learner and engine log-probs compare
    # --- loss (learner.loss.LossConfig) --------------------------------------------------------
    epsilon: float = 0.2  # PPO clip below (1 - epsilon)
    epsilon_high: float = 0.28  # DAPO clip above (1 + epsilon_high)
    is_min: float = 0.125  # tokens whose importance ratio falls outside [is_min, is_max] are masked out
    is_max: float = 8.0
    beta: float = 0.0  # KL to the base model (adapter disabled); 0 skips the reference forward
    scale_by_std: bool = True  # advantage (r - mean) / std; false: r - mean ("Dr. GRPO")
    # --- policy versions and publishing ------------------------------------------------------
    # Samples more versions behind the learner are dropped; match `serve --max-staleness`. Versions
    # advance even when publish = false: raise it to train offline on old samples.
    max_staleness: int = 2
    # Every this many steps, if the weights changed since the last version (an optimizer step was
    # taken), the learner cuts policy-v{N+1} and publishes it; steps without a learning signal cut none.
    weight_sync_steps: int = 1
    publish: bool = True  # false: train without a gateway (nothing is published)
    gateway_url: str = "http://127.0.0.1:8000"  # the gateway's admin API (`harnessrl serve`)
    admin_key: str = ""  # x-admin-key for /admin; the CLI falls back to $HARNESSRL_ADMIN_KEY
    publish_retries: int = 5  # attempts after a transport error (connect refused, timeout), backoff doubling
    publish_timeout_s: float = 120.0  # per HTTP request; loading an adapter into vLLM takes well under that
    # --- checkpoints, outputs, loop -----------------------------------------------------------
    output_dir: str = ""  # root of the folders below; the CLI defaults it to $HARNESSRL_HOME/learner/<run>
    checkpoint_dir: str = ""  # default <output_dir>/checkpoints
    adapters_dir: str = ""  # default <output_dir>/adapters (policy-v{N} folders the engine loads)
    tensorboard_dir: str = ""  # default <output_dir>/tensorboard
    checkpoint_every: int = 1  # steps between checkpoints; publishing steps always checkpoint first
    keep_checkpoints: int = 2  # newest committed checkpoints kept on disk
    poll_interval_s: float = 2.0  # seconds between looks for ready groups
    max_steps: int = 0  # stop after this many steps in total (a resumed run counts earlier ones); 0 = never
    metrics_port: int = 0  # serve Prometheus /metrics (harnessrl_learner_*) on 127.0.0.1:<port>; 0 = off
    # --- held-out evaluation: `harnessrl train` runs it beside the learner (harnessrl.periodic_eval) ---
    eval_every: int = 0  # evaluate the base model, then every this many policy versions; 0 = off
    eval_tasks: str = ""  # the dataset (as `harnessrl eval --tasks` takes it); its test split is evaluated
    eval_test_fraction: float = 0.2  # the split: the same as training's --test-fraction
    eval_k: int = 4  # pinned rollouts per held-out task per evaluation
    eval_harness: str = "builtin"  # builtin | opencode | pi | hermes | oneshot
    eval_sandbox: str = "local"
    eval_concurrency: int = 4

    def __post_init__(self) -> None:
        _validate(self)

    def loss(self) -> LossConfig:
        return LossConfig(epsilon=self.epsilon, epsilon_high=self.epsilon_high, is_min=self.is_min,
                          is_max=self.is_max, beta=self.beta)

    def step(self) -> StepConfig:
        forward = ForwardConfig(kernel=self.attn_implementation, chunk_tokens=self.chunk_tokens,
                                checkpoint_min_tokens=self.checkpoint_min_tokens,
                                activation_checkpointing=self.activation_checkpointing)
        return StepConfig(loss=self.loss(), max_grad_norm=self.max_grad_norm, temperature=self.temperature,
                          forward=forward)

    def publishes_at(self, step: int) -> bool:
        return step > 0 and step % self.weight_sync_steps == 0

    def checkpoints_at(self, step: int) -> bool:
        # A published version must be covered by a committed checkpoint: a crash after publishing
        # must never retrain those groups into a different adapter under the same version.
        return step > 0 and (step % self.checkpoint_every == 0 or (self.publish and self.publishes_at(step)))


def _validate(c: LearnerConfig) -> None:
    positive = ("lora_rank", "lora_alpha", "groups_per_step", "weight_sync_steps", "checkpoint_every",
                "keep_checkpoints", "chunk_tokens")
    for name in positive:
        if getattr(c, name) < 1:
            raise ConfigError(f"{name} must be at least 1, got {getattr(c, name)}")
    for name in ("max_staleness", "warmup_steps", "max_steps", "publish_retries", "weight_decay", "beta",
                 "token_budget", "min_saved_tokens", "checkpoint_min_tokens"):
        if getattr(c, name) < 0:
            raise ConfigError(f"{name} must not be negative, got {getattr(c, name)}")
    if not (c.lr > 0 and math.isfinite(c.lr)):
        raise ConfigError(f"lr must be a positive number, got {c.lr}")
    if c.scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {c.scheduler!r}")
    if c.scheduler != "constant" and c.max_steps == 0:
        raise ConfigError(f"scheduler = {c.scheduler!r} decays until max_steps: "
                          f"set max_steps, or scheduler = 'constant'")
    if c.dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {c.dtype!r}")
    if c.attn_implementation not in KERNELS:
        raise ConfigError(f"attn_implementation must be one of {', '.join(KERNELS)} (packed attention, "
                          f"learner.attention), got {c.attn_implementation!r}")
    if not 0 < c.is_min <= 1 <= c.is_max:
        raise ConfigError(f"need 0 < is_min <= 1 <= is_max, got is_min={c.is_min}, is_max={c.is_max}")
    if c.epsilon <= 0 or c.epsilon_high <= 0 or c.temperature <= 0 or c.poll_interval_s <= 0:
        raise ConfigError("epsilon, epsilon_high, temperature and poll_interval_s must be positive")
    if not 0 <= c.lora_dropout < 1 or not 0 <= c.min_lr_ratio <= 1:
        raise ConfigError("lora_dropout must be in [0, 1) and min_lr_ratio in [0, 1]")
    if not 0 <= c.metrics_port <= 65535:
        raise ConfigError(f"metrics_port must be a TCP port (1-65535), or 0 for no metrics endpoint; "
                          f"got {c.metrics_port}")
    if not c.lora_targets:
        raise ConfigError("lora_targets must name at least one module")
    if c.eval_every < 0 or c.eval_k < 1 or c.eval_concurrency < 1 or not 0 <= c.eval_test_fraction <= 1:
        raise ConfigError("eval_every must not be negative, eval_k and eval_concurrency at least 1, "
                          "eval_test_fraction in [0, 1]")
    if c.eval_every and not c.eval_tasks:
        raise ConfigError("eval_every needs eval_tasks: the dataset whose test split is evaluated "
                          "(e.g. eval_tasks = \"builtin:arithmetic\" or a folder of Harbor tasks)")


_FIELDS = {f.name: f for f in fields(LearnerConfig)}


def config_from_dict(values: dict[str, Any], source: str = "config") -> LearnerConfig:
    """A config from parsed TOML; unknown keys and wrong types are errors naming the key."""
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], _FIELDS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"unknown key {unknown[0]!r} in {source}; {hint}known keys: {', '.join(_FIELDS)}")
    return LearnerConfig(**{name: _coerce(name, value, source) for name, value in values.items()})


def _coerce(name: str, value: Any, source: str) -> Any:
    """TOML gives ints for floats written without a point and lists for tuples: accept both."""
    default = _FIELDS[name].default
    if default is MISSING:  # pragma: no cover - every field has a default
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:  # tuples
        ok = isinstance(value, list) and all(isinstance(v, type(default[0])) or
                                             (isinstance(default[0], float) and isinstance(v, int)) for v in value)
        value = tuple(float(v) if isinstance(default[0], float) else v for v in value) if ok else value
        ok = ok and (name != "adam_betas" or len(value) == 2)
    if not ok:
        raise ConfigError(f"{name} in {source} must be like {_toml_value(default)}, got {value!r}")
    return value


def load_config(path: Path | None, **overrides: Any) -> LearnerConfig:
    """Read a TOML file (None: all defaults), then apply non-None overrides (from the CLI)."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    config = config_from_dict(values, str(path or "config"))
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


def resolve_paths(config: LearnerConfig, default_output: Path) -> LearnerConfig:
    """Fill the empty folders from output_dir (itself defaulting to ``default_output``); absolute,
    because the engine loads adapters by path from its own working directory."""
    root = Path(config.output_dir or default_output).expanduser().resolve()
    return replace(
        config,
        output_dir=str(root),
        checkpoint_dir=str(Path(config.checkpoint_dir or root / "checkpoints").expanduser().resolve()),
        adapters_dir=str(Path(config.adapters_dir or root / "adapters").expanduser().resolve()),
        tensorboard_dir=str(Path(config.tensorboard_dir or root / "tensorboard").expanduser().resolve()),
    )


def dump_toml(config: LearnerConfig) -> str:
    """The config as TOML (`harnessrl train --show-config`); secrets are left out."""
    lines = []
    for name, value in asdict(config).items():
        if name == "admin_key":
            value = ""
        lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)
