"""The learner's settings: a frozen dataclass of sections, read from TOML (`harnessrl train --config`).

    model_dir = "/models/smollm2"        # top-level: the model, devices, the loop
    [lora]       rank = 16               # LoraSettings
    [optimizer]  lr = 1e-4               # OptimizerSettings
    [loss]       epsilon = 0.2           # learner.loss.LossConfig itself
    [forward]    kernel = "auto"         # learner.forward.ForwardConfig itself
    [batch]      groups_per_step = 4     # BatchSettings
    [publish]    gateway_url = "..."     # PublishSettings
    [checkpoint] every = 1               # CheckpointSettings
    [eval]       every = 0               # EvalSettings
    [parallel]   shard = "none"          # ParallelSettings (under torchrun)

Every key is optional; the defaults are the dataclasses' (``harnessrl train --show-config`` prints them
as TOML). A key no section knows is an error that names it, so a typo (``rnak``) never silently trains
with a default. The old flat form (``lora_rank = 8`` at the top) still loads: each flat key maps to its
section (``FLAT_KEYS``) and the loader logs the new spelling.

Paths left empty are derived from ``output_dir`` (see ``resolve_paths``), which the CLI defaults to
``$HARNESSRL_HOME/learner/<run>``; the learner never reads environment variables itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from learner.attention import KERNELS
from learner.forward import ForwardConfig
from learner.loss import IS_CORRECTIONS, LossConfig
from learner.step import StepConfig

logger = logging.getLogger(__name__)

Scheduler = Literal["constant", "linear", "cosine"]
Shard = Literal["none", "fsdp"]
DType = Literal["auto", "float32", "bfloat16", "float16"]
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A config file or value the learner cannot use; the message names the key."""


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 16  # must not exceed the engine's --max-lora-rank (serve's default 16)
    alpha: int = 32
    dropout: float = 0.0  # 0 keeps the learner's log-probs those of the policy the engine sampled
    targets: tuple[str, ...] = ALL_LINEAR  # module names LoRA wraps (vLLM supports all of these)
    seed: int = 0  # LoRA initialisation; a resumed run loads its weights instead
    # a peft adapter folder to start from (e.g. `harnessrl sft`'s warm start) instead of a fresh LoRA;
    # its own rank and targets apply. "": fresh. A resumed run loads its checkpoint either way.
    init_adapter: str = ""
    # the policy version init_adapter is already served as (sft --publish): the learner starts there and
    # publishes init_version + 1 next, instead of refusing a gateway "newer" than it. 0: unpublished
    init_version: int = 0


@dataclass(frozen=True)
class OptimizerSettings:
    lr: float = 1e-4  # AdamW peak learning rate (LoRA wants ~10x the full fine-tuning rate)
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = 1.0  # global L2 clip of the LoRA gradients; <= 0 disables clipping
    warmup_steps: int = 0  # linear warm-up from 0 to lr over this many optimizer steps
    scheduler: Scheduler = "constant"  # after warm-up: decay to min_lr_ratio * lr by max_steps
    min_lr_ratio: float = 0.0


@dataclass(frozen=True)
class BatchSettings:
    groups_per_step: int = 4  # ready groups per optimizer step (the step waits until that many are ready)
    # Tokens per packed row, i.e. per micro-batch: gradients accumulate over every row of a step.
    # A sample longer than this is refused (counted), never truncated. 0: the engine's max model length
    # (read from the gateway's GET /admin/policy at start; 32768 when no gateway says it).
    token_budget: int = 0
    tree_packing: bool = True  # samples sharing a prefix (a group's prompt) forward it once (learner.packing)
    min_saved_tokens: int = 128  # a tree saving fewer tokens than this is packed flat
    include_side: bool = False  # also train on side calls (titles, summaries)
    scale_by_std: bool = True  # advantage (r - mean) / std; false: r - mean ("Dr. GRPO")
    # "group": GRPO's, within each group; "session": live sessions' (learner.session_advantages), a
    # running baseline per user, leave-one-out across the batch for users with few sessions yet
    advantage: str = "group"
    # Samples more versions behind the learner are dropped. A publishing learner uses the gateway's
    # (`serve --max-staleness`, GET /admin/policy); this value applies offline (publish.enabled = false:
    # versions still advance, raise it to train on old samples) and with a gateway that does not say.
    max_staleness: int = 2


@dataclass(frozen=True)
class PublishSettings:
    enabled: bool = True  # false: train without a gateway (nothing is published)
    gateway_url: str = "http://127.0.0.1:8000"  # the gateway's admin API (`harnessrl serve`)
    admin_key: str = ""  # x-admin-key for /admin; the CLI falls back to $HARNESSRL_ADMIN_KEY
    # Every this many steps, if the weights changed since the last version (an optimizer step was
    # taken), the learner cuts policy-v{N+1} and publishes it; steps without a learning signal cut none.
    weight_sync_steps: int = 1
    retries: int = 5  # attempts after a transport error (connect refused, timeout), backoff doubling
    timeout_s: float = 120.0  # per HTTP request; loading an adapter into vLLM takes well under that
    adapters_dir: str = ""  # default <output_dir>/adapters (policy-v{N} folders the engine loads)


@dataclass(frozen=True)
class CheckpointSettings:
    dir: str = ""  # default <output_dir>/checkpoints
    every: int = 1  # steps between checkpoints; publishing steps always checkpoint first
    keep: int = 2  # newest committed checkpoints kept on disk


@dataclass(frozen=True)
class EvalSettings:
    """Held-out evaluation: `harnessrl train` runs it beside the learner (harnessrl.evaluation.periodic)."""

    every: int = 0  # evaluate the base model, then every this many policy versions; 0 = off
    tasks: str = ""  # the dataset (as `harnessrl eval --tasks` takes it); its test split is evaluated
    test_fraction: float = 0.2  # the split: the same as training's --test-fraction
    k: int = 4  # pinned rollouts per held-out task per evaluation
    harness: str = "builtin"  # a name of harnesses.registry.harness_names()
    sandbox: str = "local"
    concurrency: int = 4


@dataclass(frozen=True)
class ParallelSettings:
    """How ranks under torchrun split the work (one process: both are the same)."""

    # none: data parallelism, every rank holds the whole base (learner.distributed); fsdp: the base's
    # decoder layers sharded across ranks with FSDP2, the LoRA weights whole on each (learner.sharding)
    shard: Shard = "none"


@dataclass(frozen=True)
class LearnerConfig:
    model_dir: str = ""  # Hugging Face folder of the base model the engine serves (required)
    # training dtype of the base weights: auto = bfloat16 on CUDA, float32 on CPU (LoRA weights stay float32)
    dtype: DType = "auto"
    device: str = "auto"  # auto: cuda:<LOCAL_RANK> when CUDA is available, else cpu
    temperature: float = 1.0  # the sampler's temperature, so learner and engine log-probs compare
    output_dir: str = ""  # root of the folders; the CLI defaults it to $HARNESSRL_HOME/learner/<run>
    tensorboard_dir: str = ""  # default <output_dir>/tensorboard
    poll_interval_s: float = 2.0  # seconds between looks for ready groups
    max_steps: int = 0  # stop after this many steps in total (a resumed run counts earlier ones); 0 = never
    metrics_port: int = 0  # serve Prometheus /metrics (harnessrl_learner_*) on 127.0.0.1:<port>; 0 = off
    lora: LoraSettings = field(default_factory=LoraSettings)
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    loss: LossConfig = field(default_factory=LossConfig)
    forward: ForwardConfig = field(default_factory=ForwardConfig)  # packed attention kernel, chunks, checkpointing
    batch: BatchSettings = field(default_factory=BatchSettings)
    publish: PublishSettings = field(default_factory=PublishSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    parallel: ParallelSettings = field(default_factory=ParallelSettings)

    def __post_init__(self) -> None:
        _validate(self)

    def step(self) -> StepConfig:
        return StepConfig(
            loss=self.loss,
            max_grad_norm=self.optimizer.max_grad_norm,
            temperature=self.temperature,
            forward=self.forward,
        )

    def publishes_at(self, step: int) -> bool:
        return step > 0 and step % self.publish.weight_sync_steps == 0

    def checkpoints_at(self, step: int) -> bool:
        # A published version must be covered by a committed checkpoint: a crash after publishing
        # must never retrain those groups into a different adapter under the same version.
        return step > 0 and (step % self.checkpoint.every == 0 or (self.publish.enabled and self.publishes_at(step)))


SECTIONS = {f.name: f.default_factory for f in fields(LearnerConfig) if f.default_factory is not dataclasses.MISSING}
TOP_LEVEL = tuple(f.name for f in fields(LearnerConfig) if f.name not in SECTIONS)

# The old flat form (one table of 45 keys): flat name -> (section, key).
FLAT_KEYS: dict[str, tuple[str, str]] = {
    "lora_rank": ("lora", "rank"),
    "lora_alpha": ("lora", "alpha"),
    "lora_dropout": ("lora", "dropout"),
    "lora_targets": ("lora", "targets"),
    "attn_implementation": ("forward", "kernel"),
    "publish": ("publish", "enabled"),
    "publish_retries": ("publish", "retries"),
    "publish_timeout_s": ("publish", "timeout_s"),
    "checkpoint_dir": ("checkpoint", "dir"),
    "checkpoint_every": ("checkpoint", "every"),
    "keep_checkpoints": ("checkpoint", "keep"),
    **{
        f"eval_{name}": ("eval", name)
        for name in ("every", "tasks", "test_fraction", "k", "harness", "sandbox", "concurrency")
    },
    **{
        name: (section, name)
        for section, names in (
            ("lora", ("seed", "init_adapter", "init_version")),
            (
                "optimizer",
                ("lr", "weight_decay", "adam_betas", "max_grad_norm", "warmup_steps", "scheduler", "min_lr_ratio"),
            ),
            ("loss", ("epsilon", "epsilon_high", "is_min", "is_max", "is_correction", "beta", "mismatch_alarm")),
            ("forward", ("chunk_tokens", "checkpoint_min_tokens", "activation_checkpointing")),
            (
                "batch",
                (
                    "groups_per_step",
                    "token_budget",
                    "tree_packing",
                    "min_saved_tokens",
                    "include_side",
                    "scale_by_std",
                    "advantage",
                    "max_staleness",
                ),
            ),
            ("publish", ("gateway_url", "admin_key", "weight_sync_steps", "adapters_dir")),
        )
        for name in names
    },
}


def _validate(c: LearnerConfig) -> None:
    o, b, p, k, e = c.optimizer, c.batch, c.publish, c.checkpoint, c.eval
    for name, value in (
        ("lora.rank", c.lora.rank),
        ("lora.alpha", c.lora.alpha),
        ("batch.groups_per_step", b.groups_per_step),
        ("publish.weight_sync_steps", p.weight_sync_steps),
        ("checkpoint.every", k.every),
        ("checkpoint.keep", k.keep),
        ("forward.chunk_tokens", c.forward.chunk_tokens),
    ):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    for name, value in (
        ("batch.max_staleness", b.max_staleness),
        ("optimizer.warmup_steps", o.warmup_steps),
        ("max_steps", c.max_steps),
        ("publish.retries", p.retries),
        ("optimizer.weight_decay", o.weight_decay),
        ("loss.beta", c.loss.beta),
        ("loss.mismatch_alarm", c.loss.mismatch_alarm),
        ("batch.token_budget", b.token_budget),
        ("batch.min_saved_tokens", b.min_saved_tokens),
        ("forward.checkpoint_min_tokens", c.forward.checkpoint_min_tokens),
    ):
        if value < 0:
            raise ConfigError(f"{name} must not be negative, got {value}")
    if not (o.lr > 0 and math.isfinite(o.lr)):
        raise ConfigError(f"optimizer.lr must be a positive number, got {o.lr}")
    _check_choice("optimizer.scheduler", o.scheduler, typing.get_args(Scheduler))
    if o.scheduler != "constant" and c.max_steps == 0:
        raise ConfigError(
            f"optimizer.scheduler = {o.scheduler!r} decays until max_steps: set max_steps, or scheduler = 'constant'"
        )
    _check_choice("dtype", c.dtype, typing.get_args(DType))
    _check_choice("parallel.shard", c.parallel.shard, typing.get_args(Shard))
    _check_choice("forward.kernel", c.forward.kernel, KERNELS)
    _check_choice("loss.is_correction", c.loss.is_correction, IS_CORRECTIONS)
    _check_choice("batch.advantage", c.batch.advantage, ("group", "session"))
    lo, hi = c.loss.is_min, c.loss.is_max
    if not ((lo is None or 0 < lo <= 1) and (hi is None or hi >= 1)):
        raise ConfigError(f"need 0 < loss.is_min <= 1 <= loss.is_max, got is_min={lo}, is_max={hi}")
    if c.loss.epsilon <= 0 or c.loss.epsilon_high <= 0 or c.temperature <= 0 or c.poll_interval_s <= 0:
        raise ConfigError("loss.epsilon, loss.epsilon_high, temperature and poll_interval_s must be positive")
    if not 0 <= c.lora.dropout < 1 or not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError("lora.dropout must be in [0, 1) and optimizer.min_lr_ratio in [0, 1]")
    if not 0 <= c.metrics_port <= 65535:
        raise ConfigError(
            f"metrics_port must be a TCP port (1-65535), or 0 for no metrics endpoint; got {c.metrics_port}"
        )
    if not c.lora.targets:
        raise ConfigError("lora.targets must name at least one module")
    if e.every < 0 or e.k < 1 or e.concurrency < 1 or not 0 <= e.test_fraction <= 1:
        raise ConfigError(
            "eval.every must not be negative, eval.k and eval.concurrency at least 1, eval.test_fraction in [0, 1]"
        )
    if e.every and not e.tasks:
        raise ConfigError(
            "eval.every needs eval.tasks: the dataset whose test split is evaluated "
            '(e.g. tasks = "builtin:arithmetic" or a folder of Harbor tasks)'
        )


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def with_overrides(config: LearnerConfig, **values: Any) -> LearnerConfig:
    """``config`` with the non-None ``values`` set: top-level names or the flat ones (``lr``, ``lora_rank``,
    ``publish``: see FLAT_KEYS), as the CLI's options and tests give them."""
    top, sections = {}, {name: {} for name in SECTIONS}
    for key, value in values.items():
        if value is None:
            continue
        if key in TOP_LEVEL:
            top[key] = value
        elif key in FLAT_KEYS:
            section, name = FLAT_KEYS[key]
            sections[section][name] = value
        else:
            raise unknown_key(key, None, "overrides")
    built = {name: replace(getattr(config, name), **changed) for name, changed in sections.items() if changed}
    try:
        return replace(config, **top, **built)
    except TypeError as exc:  # pragma: no cover - names are checked above
        raise ConfigError(str(exc)) from None


def section_hints(section: str | None) -> dict[str, Any]:
    return typing.get_type_hints(LearnerConfig if section is None else SECTIONS[section])


def unknown_key(key: str, section: str | None, source: str) -> ConfigError:
    known = [n for n in section_hints(section) if n not in SECTIONS] if section else [*TOP_LEVEL, *SECTIONS]
    where = f"[{section}] " if section else ""
    close = difflib.get_close_matches(key, known if section else [*known, *FLAT_KEYS], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ConfigError(f"unknown key {where}{key!r} in {source}; {hint}known keys: {', '.join(known)}")


def resolve_paths(config: LearnerConfig, default_output: Path) -> LearnerConfig:
    """Fill the empty folders from output_dir (itself defaulting to ``default_output``); absolute,
    because the engine loads adapters by path from its own working directory."""
    root = Path(config.output_dir or default_output).expanduser().resolve()

    def folder(given: str, default: str) -> str:
        return str(Path(given or root / default).expanduser().resolve())

    return replace(
        config,
        output_dir=str(root),
        tensorboard_dir=folder(config.tensorboard_dir, "tensorboard"),
        checkpoint=replace(config.checkpoint, dir=folder(config.checkpoint.dir, "checkpoints")),
        publish=replace(config.publish, adapters_dir=folder(config.publish.adapters_dir, "adapters")),
    )
