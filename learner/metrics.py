"""Per-step metrics: gathered from the batch, the train step and the clock; stored and sent to TensorBoard
and Prometheus.

Stored as one JSON row per (run, step) in ``learner_steps`` so dashboards and tests read them from
the same store as the trajectories; a step replayed after a crash overwrites its row. TensorBoard
gets every numeric value under ``learner/<key>``; the Prometheus exporter (``learner.prometheus``,
when ``metrics_port`` is set) the same dict, under the policy's label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learner.groups import Batch
from learner.prometheus import PolicyExport
from store.store import Store

Metrics = dict[str, float | int | bool | None]

# Keys of learner.step.train_step's result that are reported as they are.
TRAIN_KEYS = (
    "mismatch_tokens",  # learner.mismatch: fresh tokens whose learner and sampler log-probs were compared
    "mismatch_mean_abs",
    "mismatch_max_abs",
    "mismatch_k3",
    "mismatch_frac_over",
    "loss",
    "echo_loss",  # ECHO: mean NLL per tool-result token (not times echo_weight); None: none that step
    "echo_tokens",  # ECHO: tool-result tokens its term covered (0 at echo_weight 0)
    "kl",
    "entropy",
    "grad_norm",
    "ratio_min",
    "ratio_mean",
    "ratio_max",
    "is_masked_fraction",
    "clip_frac_low",
    "clip_frac_high",
    "tokens",
    "tokens_sampled",
    "tokens_trained",
    "rows",
    "optimizer_stepped",
)


def batch_metrics(batch: Batch, samples_too_long: int) -> Metrics:
    """What the data looked like: rewards, drops, staleness."""
    adv = batch.advantages
    ages = batch.staleness
    return {
        "groups": len(batch.groups),
        "groups_kept": adv.groups_kept,
        "groups_zero_std": adv.groups_zero_std,
        "groups_empty": adv.groups_empty,
        "frac_reward_zero_std": adv.frac_reward_zero_std,
        "reward_mean": adv.reward_mean_all,  # every scored rollout of every group read
        "reward_mean_kept": adv.reward_mean_kept,  # rollouts of groups with a learning signal
        "rollouts_unscored": adv.rollouts_unscored,
        "samples_read": batch.samples_read,
        "samples": len(batch.samples) - samples_too_long,  # trained on
        "samples_echo_only": batch.samples_echo_only,  # of samples: no advantage, trained by ECHO alone
        "samples_stale": batch.samples_stale,
        "samples_unscored": batch.samples_unscored,
        "samples_empty": batch.samples_empty,
        "samples_too_long": samples_too_long,
        "staleness_mean": sum(ages) / len(ages) if ages else None,
        "staleness_max": max(ages) if ages else None,
        "temperature": batch.temperature,  # the run's sampling temperature, which log-probs were taken at
    }


@dataclass(frozen=True)
class StepTimes:
    """Where a step's time went (seconds, the learner's clock)."""

    step_s: float  # batch, packing, forward/backward, optimizer, checkpoint (not waiting)
    wait_s: float  # waiting for enough ready groups
    swap_s: float | None  # adapter save -> gateway's answer; None when not published this step


def step_metrics(
    step: int,
    version: int,
    lr: float,
    batch: Batch,
    samples_too_long: int,
    train: dict[str, Any],
    times: StepTimes,
    groups_quarantined: int = 0,
) -> Metrics:
    metrics: Metrics = {"step": step, "version": version, "lr": lr}
    metrics.update(batch_metrics(batch, samples_too_long))
    # ready groups the learner could not use since the previous step: marked quarantined, skipped
    metrics["groups_quarantined"] = groups_quarantined
    metrics.update({key: train.get(key) for key in TRAIN_KEYS})
    step_s = times.step_s
    metrics.update(
        {
            "step_time_s": step_s,
            "wait_time_s": times.wait_s,
            "swap_time_s": times.swap_s,
            "trained_tokens_per_s": (train.get("tokens") or 0) / step_s if step_s > 0 else None,
            "peak_rss_gib": peak_rss_gib(),  # the learner process's most resident memory so far
        }
    )
    return {key: _finite(value) for key, value in metrics.items()}


def peak_rss_gib() -> float:
    """The most resident memory this process has held (GiB): what a step of long samples costs on a CPU."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss: KiB on Linux


def why_nothing_trained(metrics: Metrics) -> str | None:
    """A step that trained on no sample, said plainly (e.g. "4 groups had zero reward spread"); None when
    it trained on something. Read from its metrics, so the log says what /api/runs/{run}/steps records."""
    if metrics.get("samples"):
        return None
    reasons = [
        ("groups_zero_std", "group", "had zero reward spread (every rollout scored the same)"),
        ("groups_empty", "group", "had no scored rollout"),
        ("samples_stale", "sample", "{was} older than max_staleness"),
        ("samples_unscored", "sample", "had no advantage (a group without reward spread, or no reward)"),
        ("samples_empty", "sample", "had no sampled token"),
        ("samples_too_long", "sample", "{was} longer than the token budget"),
        ("groups_quarantined", "group", "could not be read and {was} quarantined"),
    ]
    said = [
        f"{n} {noun}{'' if n == 1 else 's'} " + text.format(was="was" if n == 1 else "were")
        for key, noun, text in reasons
        if (n := metrics.get(key))
    ]
    read = metrics.get("groups", 0)
    return f"trained on nothing of its {read} group{'' if read == 1 else 's'}: " + (
        "; ".join(said) if said else "no sample to train on"
    )


def _finite(value: Any) -> Any:
    """JSON columns (PostgreSQL's especially) refuse NaN and infinity: store None instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsSink:
    """Writes each step's metrics to the store, to TensorBoard and to the policy's Prometheus series
    (``exporter``: its owner, the learner, serves and closes the endpoint, which may outlive the sink)."""

    def __init__(self, store: Store, run_id: int, tensorboard_dir: Path | None, exporter: PolicyExport | None = None):
        self.store = store
        self.run_id = run_id
        self.exporter = exporter
        self.writer = None
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked for

            self.writer = SummaryWriter(log_dir=str(tensorboard_dir))

    async def record(self, step: int, metrics: Metrics) -> None:
        await self.store.training.record_step(self.run_id, step, metrics)
        if self.exporter is not None:
            self.exporter.observe(metrics)
        if self.writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.writer.add_scalar(f"learner/{key}", float(value), step)
            self.writer.flush()

    async def record_mismatch(self, version: int) -> None:
        """Export the mismatch of ``version``'s trained calls per harness and model (Prometheus only)."""
        if self.exporter is not None:
            self.exporter.policy_mismatch(await self.store.mismatch.summary(self.run_id, version))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def step_summary(metrics: Metrics) -> str:
    """The step's log line: the numbers a person watching the log wants."""
    keys = (
        "reward_mean",
        "groups_kept",
        "groups_quarantined",
        "samples",
        "samples_stale",
        "staleness_max",
        "loss",
        "echo_loss",
        "grad_norm",
        "step_time_s",
        "swap_time_s",
    )
    return " ".join(f"{k}={_fmt(metrics.get(k))}" for k in keys)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
