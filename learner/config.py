"""The learner's settings: frozen pydantic models of sections (learner.settings), read from TOML by the loader
every job's config uses (`harnessrl train --config`, harnessrl/config/files.py).

    model_dir = "/models/smollm2"        # top-level: the model, devices, the loop
    [lora]       rank = 16               # LoraSettings
    [optimizer]  lr = 1e-4               # OptimizerSettings
    [loss]       epsilon = 0.2           # learner.step_settings.LossConfig itself
    [forward]    kernel = "auto"         # learner.step_settings.ForwardConfig itself
    [batch]      groups_per_step = 4     # BatchSettings
    [publish]    gateway_url = "..."     # PublishSettings
    [checkpoint] every = 1               # CheckpointSettings
    [eval]       every = 0               # EvalSettings
    [parallel]   shard = "none"          # ParallelSettings (under torchrun)

Every key is optional and declared once, on its field: its type, its range, its default and its description
(the option's help; ``harnessrl train --show-config`` prints every key). A key no section knows is an error
that names it, so a typo (``rnak``) never silently trains with a default.

Paths left empty are derived from ``output_dir`` (see ``resolve_paths``), which the CLI defaults to
``$HARNESSRL_HOME/learner/<run>``; the learner never reads environment variables itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from learner.settings import ConfigError, Settings
from learner.step_settings import ForwardConfig, LossConfig

if TYPE_CHECKING:
    from learner.step import StepConfig

__all__ = ["ConfigError", "ForwardConfig", "LearnerConfig", "LossConfig", "resolve_paths"]

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
Loose = Field(strict=False)  # TOML and the command line give a tuple as a list
# The admin key is a secret: never dumped (--show-config, the TOML a job writes); its option and variable are
# those of every command that publishes (harnessrl/cli/key_options.py reads these).
SECRET_OPTION = {"flag": "--admin-key", "envvar": "HARNESSRL_ADMIN_KEY"}


class LoraSettings(Settings):
    """The LoRA adapter trained."""

    rank: int = Field(16, ge=1, description="LoRA rank; must not exceed the engine's --max-lora-rank (serve's 16)")
    alpha: int = Field(32, ge=1, description="LoRA alpha")
    dropout: float = Field(
        0.0, ge=0, lt=1, description="LoRA dropout; 0 keeps the learner's log-probs those of the policy sampled"
    )
    targets: Annotated[tuple[str, ...], Loose] = Field(
        ALL_LINEAR, min_length=1, description="Module names LoRA wraps (vLLM supports all of these), repeatable"
    )
    seed: int = Field(0, description="LoRA initialisation; a resumed run loads its weights instead")
    init_adapter: str = Field(
        "",
        description="A peft adapter folder to start from (e.g. `harnessrl sft`'s warm start) instead of a fresh "
        "LoRA; its own rank and targets apply. Empty: fresh. A resumed run loads its checkpoint either way",
    )
    init_version: int = Field(
        0,
        ge=0,
        description="The policy version init_adapter is already served as (sft --publish): the learner publishes "
        "init_version + 1 next instead of refusing a gateway newer than it. 0: unpublished",
    )


class OptimizerSettings(Settings):
    """AdamW and its learning-rate schedule."""

    lr: float = Field(
        1e-4, gt=0, allow_inf_nan=False, description="AdamW peak learning rate (LoRA wants ~10x full fine-tuning's)"
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    adam_betas: Annotated[tuple[float, float], Loose] = Field((0.9, 0.999), description="AdamW betas")
    max_grad_norm: float = Field(1.0, description="Global L2 clip of the LoRA gradients; <= 0 disables clipping")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up from 0 to lr over this many optimizer steps")
    scheduler: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="After warm-up: constant, or decay (linear, cosine) to min_lr_ratio * lr by max_steps"
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Where the scheduler's decay ends, as a share of lr")


class BatchSettings(Settings):
    """What an optimizer step trains on."""

    groups_per_step: int = Field(
        4, ge=1, description="Ready groups per optimizer step (the step waits until that many are ready)"
    )
    token_budget: int = Field(
        0,
        ge=0,
        description="Tokens per packed row (micro-batch; gradients accumulate over a step's rows). A longer sample "
        "is refused (counted), never truncated. 0: the engine's max model length (the gateway's GET /admin/policy; "
        "32768 when no gateway says it)",
    )
    tree_packing: bool = Field(
        True, description="Samples sharing a prefix (a group's prompt) forward it once (learner.packing)"
    )
    min_saved_tokens: int = Field(128, ge=0, description="A tree saving fewer tokens than this is packed flat")
    include_side: bool = Field(False, description="Also train on side calls (titles, summaries)")
    scale_by_std: bool = Field(True, description='advantage = group: (r - mean) / std; false: r - mean ("Dr. GRPO")')
    advantage: Literal["group", "session", "maxrl"] = Field(
        "group",
        description="group: GRPO's, within each group; session: live sessions' (learner.session_advantages), a "
        "running baseline per user, leave-one-out across the batch for users with few sessions yet; maxrl: "
        "MaxRL's (r - mean) / mean within each group, for rewards in [0, 1] (learner.advantages)",
    )
    max_staleness: int = Field(
        2,
        ge=0,
        description="Samples more versions behind the learner are dropped. A publishing learner uses the "
        "gateway's (`serve --max-staleness`); this applies offline (publish.enabled = false) and with a gateway "
        "that does not say",
    )


class PublishSettings(Settings):
    """Publishing each new version to the gateway."""

    enabled: bool = Field(True, description="false: train without a gateway (nothing is published)")
    gateway_url: str = Field("http://127.0.0.1:8000", description="The gateway's admin API (`harnessrl serve`)")
    admin_key: str = Field(
        "",
        exclude=True,
        repr=False,
        description="The gateway's admin key, for publishing [default: $HARNESSRL_HOME/admin.key]",
        json_schema_extra=SECRET_OPTION,
    )
    weight_sync_steps: int = Field(
        1,
        ge=1,
        description="Every this many steps, if an optimizer step changed the weights since the last version, the "
        "learner cuts policy-v{N+1} and publishes it",
    )
    retries: int = Field(5, ge=0, description="Attempts after a transport error (refused, timeout), backoff doubling")
    timeout_s: float = Field(120.0, gt=0, description="Per HTTP request (loading an adapter takes well under that)")
    adapters_dir: str = Field("", description="policy-v{N} folders the engine loads [default: <output_dir>/adapters]")


class CheckpointSettings(Settings):
    """Checkpoints a resumed learner starts from."""

    dir: str = Field("", description="The checkpoints' folder [default: <output_dir>/checkpoints]")
    every: int = Field(1, ge=1, description="Steps between checkpoints; publishing steps always checkpoint first")
    keep: int = Field(2, ge=1, description="Newest committed checkpoints kept on disk")


class EvalSettings(Settings):
    """Held-out evaluation: `harnessrl train` runs it beside the learner (harnessrl.evaluation.periodic)."""

    every: int = Field(0, ge=0, description="Evaluate the base model, then every this many policy versions; 0: off")
    tasks: str = Field(
        "", description="The dataset (as `harnessrl eval --tasks` takes it) whose test split is evaluated"
    )
    test_fraction: float = Field(0.2, ge=0, le=1, description="The split: the same as training's --test-fraction")
    k: int = Field(4, ge=1, description="Pinned rollouts per held-out task per evaluation")
    harness: str = Field("builtin", description="The harness evaluated (a name of harnesses.registry)")
    sandbox: str = Field("local", description="Where the evaluation's rollouts run")
    concurrency: int = Field(4, ge=1, description="The evaluation's rollouts at once")


class ParallelSettings(Settings):
    """How ranks under torchrun split the work (one process: both are the same)."""

    shard: Literal["none", "fsdp"] = Field(
        "none",
        description="none: data parallelism, every rank holds the whole base (learner.distributed); fsdp: the "
        "base's decoder layers sharded across ranks with FSDP2, the LoRA weights whole on each (learner.sharding)",
    )


class LearnerConfig(Settings):
    model_dir: str = Field("", description="Hugging Face folder of the base model the engine serves")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Training dtype of the base weights: auto = bfloat16 on CUDA, float32 on CPU (LoRA stays float32)",
    )
    device: str = Field("auto", description="auto: cuda:<LOCAL_RANK> when CUDA is available, else cpu")
    temperature: float = Field(
        1.0, gt=0, description="The sampler's temperature, so learner and engine log-probs compare"
    )
    output_dir: str = Field("", description="Root of the learner's folders [default: $HARNESSRL_HOME/learner/<run>]")
    tensorboard_dir: str = Field("", description="TensorBoard logs [default: <output_dir>/tensorboard]")
    poll_interval_s: float = Field(2.0, gt=0, description="Seconds between looks for ready groups")
    max_steps: int = Field(
        0, ge=0, description="Stop after this many steps in total (a resumed run counts earlier ones); 0: never"
    )
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Serve Prometheus /metrics (harnessrl_learner_*) on 127.0.0.1:PORT; 0: off"
    )
    lora: LoraSettings = LoraSettings()
    optimizer: OptimizerSettings = OptimizerSettings()
    loss: LossConfig = LossConfig()
    forward: ForwardConfig = ForwardConfig()
    batch: BatchSettings = BatchSettings()
    publish: PublishSettings = PublishSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    eval: EvalSettings = EvalSettings()
    parallel: ParallelSettings = ParallelSettings()

    @model_validator(mode="after")
    def _keys_agree(self) -> LearnerConfig:
        """The rules between keys (each key's own range is its field's)."""
        if self.optimizer.scheduler != "constant" and self.max_steps == 0:
            raise ConfigError(
                f"optimizer.scheduler = {self.optimizer.scheduler!r} decays until max_steps: set max_steps, or "
                "scheduler = 'constant'"
            )
        if self.batch.advantage == "maxrl" and not self.batch.scale_by_std:
            raise ConfigError(
                "batch.scale_by_std = false is Dr. GRPO's r - mean; batch.advantage = 'maxrl' divides by the "
                "group's mean reward instead: leave scale_by_std at true, or advantage = 'group'"
            )
        if self.eval.every and not self.eval.tasks:
            raise ConfigError(
                "eval.every needs eval.tasks: the dataset whose test split is evaluated "
                '(e.g. tasks = "builtin:arithmetic" or a folder of Harbor tasks)'
            )
        return self

    def step(self) -> StepConfig:
        from learner.step import StepConfig  # torch: only the learner's process takes a step

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


def resolve_paths(config: LearnerConfig, default_output: Path) -> LearnerConfig:
    """Fill the empty folders from output_dir (itself defaulting to ``default_output``); absolute,
    because the engine loads adapters by path from its own working directory."""
    root = Path(config.output_dir or default_output).expanduser().resolve()

    def folder(given: str, default: str) -> str:
        return str(Path(given or root / default).expanduser().resolve())

    return config.model_copy(
        update={
            "output_dir": str(root),
            "tensorboard_dir": folder(config.tensorboard_dir, "tensorboard"),
            "checkpoint": config.checkpoint.model_copy(update={"dir": folder(config.checkpoint.dir, "checkpoints")}),
            "publish": config.publish.model_copy(
                update={"adapters_dir": folder(config.publish.adapters_dir, "adapters")}
            ),
        }
    )
