"""The learner loop's records: what a run (or one policy's slot beside others) trains with, and its
moving parts between steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from learner.config import LearnerConfig
from learner.groups import ReadyGroup
from learner.trainer import Trainer
from store.store import Store


class LearnerError(RuntimeError):
    """The learner cannot continue as configured; the message says what to change."""


@dataclass(frozen=True)
class LearnerResult:
    step: int  # steps taken in total (a resumed run counts the earlier ones)
    version: int  # the policy version the learner ended with
    reason: str  # "max_steps" or "stopped"


@dataclass
class Progress:
    """The loop's moving parts between steps (mutable on purpose; owned by one run_learner call or one
    policy's slot beside others, learner.policy_slot)."""

    step: int = 0
    version: int = 0  # the policy version the learner holds (0 = the base model)
    # The weights moved since ``version`` was cut: only then does a publishing step cut a new one
    # (steps whose groups all lack a learning signal take no optimizer step; publishing their
    # unchanged adapter would cost a swap and age every running rollout for nothing).
    changed: bool = False
    pending: list[ReadyGroup] = field(default_factory=list)  # trained since the last committed checkpoint
    unpublished: bool = False  # a publication failed on transport: retry at the next publishing step
    resumed_from: str | None = None  # the committed checkpoint this run started from
    # the probe every publication of this process is proven on (learner.adapter_probe): the tail of
    # the first sample it trained; None before any (a fixed sequence then)
    probe_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Learning:
    """What one run_learner call (or one policy's slot) trains with, the same from its first step to its last."""

    config: LearnerConfig  # paths resolved; token budget and max_staleness as the gateway serves them
    store: Store
    run: str
    run_id: int
    trainer: Trainer
