"""The settings of one training step the learner's config holds as its ``[loss]`` and ``[forward]`` tables:
GRPO's loss (learner.loss) and the packed forward (learner.forward). Here, torch-free, so the config (and the
CLI's options made from it) load without torch."""

from __future__ import annotations

import typing
from typing import Literal

from pydantic import Field

from learner.settings import Settings

Kernel = Literal["auto", "sdpa", "flash"]
KERNELS = typing.get_args(Kernel)  # learner.attention.resolve_kernel
IsCorrection = Literal["mask", "truncate"]
IS_CORRECTIONS = typing.get_args(IsCorrection)
DEFAULT_CHUNK_TOKENS = 512  # output-layer rows per chunk: chunk_tokens x V float32 logits at a time


class LossConfig(Settings):
    """GRPO's loss: the clipped surrogate, the importance correction of stale samples, KL, and ECHO's term."""

    epsilon: float = Field(
        0.2, gt=0, description="PPO clip below: the ratio is floored at 1 - epsilon (for negative advantages)"
    )
    epsilon_high: float = Field(
        0.28, gt=0, description="DAPO clip above: the ratio is capped at 1 + epsilon_high (for positive advantages)"
    )
    is_min: float | None = Field(
        0.125, ge=0, le=1, description="Tokens whose importance ratio is below this are masked out; 0: no bound"
    )
    is_max: float | None = Field(
        8.0, ge=1, description="Tokens whose importance ratio is above this are masked out; inf: no bound"
    )
    is_correction: IsCorrection = Field(
        "mask",
        description="mask: tokens outside [is_min, is_max] are dropped (masked IS); truncate: truncated IS, every "
        "sampled token trains and a ratio above is_max counts as is_max, so a token the sampler underrated keeps "
        "a bounded say (is_min unused)",
    )
    beta: float = Field(
        0.0,
        ge=0,
        description="KL coefficient; 0 disables it (no reference forward). The reference is the base model, or the "
        "adapter a warm-started learner began from (learner.reference)",
    )
    echo_weight: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="ECHO: weight of a cross-entropy term on the tool-result tokens (TokenRole.TOOL) of every "
        "sample, groups without reward spread included, in the same forward as GRPO; the mean NLL per tool token "
        "at temperature 1 (learner.loss.echo_loss). 0: no such term, today's loss bit for bit",
    )
    mismatch_alarm: float = Field(
        0.1,
        ge=0,
        description="Nats: a step whose mean |learner - sampler| log-prob on the tokens its own version sampled "
        "is above this is warned about (learner.mismatch; a float32 engine measures ~1e-5, bfloat16 ~0.03)",
    )


class ForwardConfig(Settings):
    """The packed forward: attention kernel, output-layer chunks, activation checkpointing."""

    kernel: Kernel = Field(
        "auto", description="Packed attention kernel: auto | sdpa | flash (learner.attention.resolve_kernel)"
    )
    chunk_tokens: int = Field(
        DEFAULT_CHUNK_TOKENS, ge=1, description="Output-layer rows per chunk: chunk_tokens x V float32 logits at a time"
    )
    checkpoint_min_tokens: int = Field(
        1024, ge=0, description="Rows at least this long recompute layer activations in the backward; 0: every row"
    )
    activation_checkpointing: bool = Field(
        True, description="false: keep every activation (fastest; memory grows with the row's length)"
    )
