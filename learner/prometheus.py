"""The learner's Prometheus endpoint: `/metrics` on 127.0.0.1:<metrics_port> (learner config; 0 = off).

One endpoint per learner process, however many policies it trains (learner.policies_loop): every series
carries a ``policy`` label, the policy's name, a lone learner's too (one shape for dashboards). Label
sets stay bounded: policies are few, named by the operator in the store, and a learner trains a policy
under one run at most (learner.policies_loop refuses a second), so its series never mix two runs.

Fed from the same per-step metrics dict that is stored in ``learner_steps`` and written to
TensorBoard (``learner.metrics.MetricsSink.record``), so the three never disagree. Gauges hold the
latest step's value (NaN when the step did not produce one, e.g. no loss on a step with nothing to
train); counters add up over the steps this process took (a restarted learner starts them at 0, as
Prometheus expects of counters); histograms take the step and swap times.

A policy that stops (its max_steps, its error, its job's stop) while others train on keeps its series at
their last values until the process ends: ``training`` drops to 0 (and ``failed`` to 1 on an error), so
a dashboard tells a stopped policy from one waiting for groups, and its last step stays readable.

The mismatch is also exported per harness × model × policy version (``policy_logprob_mismatch_*``), from
the store's summary of the calls the step trained: the series of the latest ``KEEP_VERSIONS`` versions
stay, older ones are removed, and at most ``MAX_POLICY_SERIES`` (harness, model) pairs per policy get their
own labels (the rest fold into model ``other``: an agent names its model, and label sets must stay bounded).

Its own CollectorRegistry: no process-wide default collectors, and tests can run several.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

PREFIX = "harnessrl_learner_"
STEP_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
SWAP_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)

# (step metrics key, gauge name, help): the latest step's value.
GAUGES = (
    ("step", "step", "Learner steps taken (a resumed run counts the earlier ones)"),
    (
        "version",
        "policy_version",
        "Policy version the step's samples were judged against (the learner's version when the step began)",
    ),
    ("lr", "lr", "Learning rate of the step"),
    ("reward_mean", "reward_mean", "Mean reward of every scored rollout of the step's groups"),
    ("reward_mean_kept", "reward_mean_kept", "Mean reward of the rollouts of groups with a learning signal"),
    ("loss", "loss", "Policy loss of the step"),
    ("echo_loss", "echo_loss", "ECHO: mean NLL per tool-result token of the step (not times echo_weight)"),
    ("kl", "kl", "KL to the base model (0 when beta = 0)"),
    ("entropy", "entropy", "Mean entropy of the trained tokens"),
    ("grad_norm", "grad_norm", "Global L2 norm of the LoRA gradients before clipping"),
    ("staleness_mean", "staleness_mean", "Mean policy versions the step's samples were behind"),
    ("staleness_max", "staleness_max", "Most policy versions a sample of the step was behind"),
    ("ratio_min", "importance_ratio_min", "Smallest token importance ratio (learner / sampler probability)"),
    ("ratio_mean", "importance_ratio_mean", "Mean token importance ratio"),
    ("ratio_max", "importance_ratio_max", "Largest token importance ratio"),
    (
        "is_masked_fraction",
        "importance_masked_fraction",
        "Sampled tokens masked out for an importance ratio outside [is_min, is_max]",
    ),
    ("clip_frac_low", "clip_fraction_low", "Trained tokens clipped below 1 - epsilon"),
    ("clip_frac_high", "clip_fraction_high", "Trained tokens clipped above 1 + epsilon_high"),
    (
        "mismatch_mean_abs",
        "logprob_mismatch_mean_abs",
        "Mean |learner - sampler| log-prob (nats) of the tokens the learner's own version sampled",
    ),
    ("mismatch_max_abs", "logprob_mismatch_max_abs", "Largest |learner - sampler| log-prob of those tokens"),
    ("mismatch_k3", "logprob_mismatch_kl", "k3 estimate of KL(sampler || learner) on those tokens"),
    ("mismatch_frac_over", "logprob_mismatch_frac_over", "Share of those tokens differing by more than 0.1 nats"),
)

# (step metrics key, counter name, help): added up over steps; exposed with a _total suffix.
COUNTERS = (
    ("samples", "samples_trained", "Samples trained on"),
    ("tokens_trained", "tokens_trained", "Tokens the loss covered (sampled, not masked)"),
    ("echo_tokens", "echo_tokens", "Tool-result tokens ECHO's term covered"),
    ("tokens", "tokens_processed", "Tokens of every packed row (prompt and sampled) through forward/backward"),
    ("samples_stale", "samples_stale", "Samples dropped for being more than max_staleness versions behind"),
    ("groups", "groups_consumed", "Groups taken by steps (consumed once their checkpoint commits)"),
    (
        "groups_quarantined",
        "groups_quarantined",
        "Ready groups the learner could not use (non-finite rewards, broken samples): marked quarantined and skipped",
    ),
)

# (MismatchSummary attribute, gauge name, help): per policy, harness, model and policy version.
POLICY_GAUGES = (
    ("mean_abs", "policy_logprob_mismatch_mean_abs", "Mean |learner - sampler| log-prob (nats) per token"),
    ("max_abs", "policy_logprob_mismatch_max_abs", "Largest |learner - sampler| log-prob of a token"),
    ("k3", "policy_logprob_mismatch_kl", "k3 estimate of KL(sampler || learner) per token"),
    ("frac_over", "policy_logprob_mismatch_frac_over", "Share of tokens differing by more than 0.1 nats"),
    ("tokens", "policy_logprob_mismatch_tokens", "Sampled tokens compared"),
)
LABEL = "policy"  # on every series: the policy's name
MISMATCH_LABELS = (LABEL, "harness", "model", "version")
KEEP_VERSIONS = 4  # policy versions whose mismatch series stay exported
MAX_POLICY_SERIES = 32  # (harness, model) pairs per policy with labels of their own; the rest are model="other"


@dataclass
class LearnerExporter:
    """The learner process's series, every policy's, on one registry served at one endpoint."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r, by = self.registry, (LABEL,)
        self.gauges = {key: Gauge(PREFIX + name, text, by, registry=r) for key, name, text in GAUGES}
        self.counters = {key: Counter(PREFIX + name, text, by, registry=r) for key, name, text in COUNTERS}
        self.step_time = Histogram(
            PREFIX + "step_time_seconds",
            "Step time: batch, packing, forward/backward, optimizer, checkpoint (not waiting)",
            by,
            buckets=STEP_BUCKETS_S,
            registry=r,
        )
        self.swap_time = Histogram(
            PREFIX + "swap_time_seconds",
            "Adapter save until the gateway serves it",
            by,
            buckets=SWAP_BUCKETS_S,
            registry=r,
        )
        self.training = Gauge(
            PREFIX + "training",
            "1 while the policy takes steps in this learner; 0 once it stopped (max_steps, an error, its job's stop)",
            by,
            registry=r,
        )
        self.failed = Gauge(
            PREFIX + "failed", "1 once the policy stopped on an error (the log says why)", by, registry=r
        )
        self.policy_gauges = {
            key: Gauge(PREFIX + name, text, MISMATCH_LABELS, registry=r) for key, name, text in POLICY_GAUGES
        }
        self._policies: dict[str, PolicyExport] = {}
        self._server = None

    def policy(self, name: str) -> PolicyExport:
        """The series of policy ``name`` (made on first use, kept until the process ends)."""
        if name not in self._policies:
            self._policies[name] = PolicyExport(self, name)
        return self._policies[name]

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics in a daemon thread; returns the bound port (0 picks a free one)."""
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class PolicyExport:
    """One policy's series on its learner's exporter (what ``learner.metrics.MetricsSink`` feeds)."""

    def __init__(self, exporter: LearnerExporter, name: str):
        self.exporter, self.name = exporter, name
        self._pairs: set[tuple[str, str]] = set()
        self._series: dict[int, set[tuple[str, ...]]] = {}  # version -> its mismatch label values
        for counter in exporter.counters.values():
            counter.labels(name)  # 0 from the policy's start, so rate() sees its first step
        exporter.step_time.labels(name)
        exporter.swap_time.labels(name)
        exporter.training.labels(name).set(1)
        exporter.failed.labels(name).set(0)

    def observe(self, metrics: dict) -> None:
        """Take one step's metrics (learner.metrics.step_metrics)."""
        e, name = self.exporter, self.name
        for key, gauge in e.gauges.items():
            gauge.labels(name).set(_number(metrics.get(key)))
        for key, counter in e.counters.items():
            counter.labels(name).inc(max(0, int(metrics.get(key) or 0)))
        if metrics.get("step_time_s") is not None:
            e.step_time.labels(name).observe(metrics["step_time_s"])
        if metrics.get("swap_time_s") is not None:  # None: nothing published this step
            e.swap_time.labels(name).observe(metrics["swap_time_s"])

    def ended(self, failed: bool) -> None:
        """The policy stopped: its series keep their last values; ``training`` says it no longer steps."""
        self.exporter.training.labels(self.name).set(0)
        self.exporter.failed.labels(self.name).set(int(failed))

    def policy_mismatch(self, summaries: Iterable) -> None:
        """Set the per-version series from ``store.mismatch.MismatchSummary`` rows (one version's)."""
        gauges = self.exporter.policy_gauges
        for row in summaries:
            labels = (self.name, *self._pair(row.harness or "", row.model), str(row.version))
            for key, gauge in gauges.items():
                gauge.labels(*labels).set(_number(getattr(row, key)))
            self._series.setdefault(row.version, set()).add(labels)
        for version in sorted(self._series)[:-KEEP_VERSIONS]:
            for labels in self._series.pop(version):
                for gauge in gauges.values():
                    gauge.remove(*labels)

    def _pair(self, harness: str, model: str) -> tuple[str, str]:
        if (harness, model) not in self._pairs and len(self._pairs) >= MAX_POLICY_SERIES:
            return harness, "other"
        self._pairs.add((harness, model))
        return harness, model


def _number(value) -> float:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else math.nan
