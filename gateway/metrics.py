"""Prometheus metrics of the gateway, on a registry per app (tests run several apps at once); calls are
labelled by their dialect's name (gateway.dialects: chat, completions, responses, messages, count_tokens,
other)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.dialects import dialect_at

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass
class GatewayMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.calls = Counter("harnessrl_calls", "Model calls by dialect and outcome", ["dialect", "status"], registry=r)
        self.latency = Histogram(
            "harnessrl_engine_latency_seconds",
            "Engine round trip of recorded calls",
            ["dialect"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.tokens_in = Counter("harnessrl_prompt_tokens", "Prompt tokens sent to the engine", ["dialect"], registry=r)
        self.tokens_out = Counter("harnessrl_output_tokens", "Tokens sampled by the engine", ["dialect"], registry=r)
        self.in_flight = Gauge("harnessrl_calls_in_flight", "Engine calls in progress", registry=r)
        self.engine_errors = Counter("harnessrl_engine_errors", "Engine failures by kind", ["kind"], registry=r)
        self.policy_version = Gauge(
            "harnessrl_policy_version", "Current version of each policy (adapter lineage)", ["policy"], registry=r
        )
        self.engine_healthy = Gauge(
            "harnessrl_engine_healthy", "1 while the engine serves, 0 while taken out", ["engine"], registry=r
        )
        self.engine_in_flight = Gauge("harnessrl_engine_in_flight", "Calls on the engine now", ["engine"], registry=r)
        self.engine_queued = Gauge("harnessrl_engine_queued", "Calls waiting for the engine", ["engine"], registry=r)
        self.engine_dtype = Gauge(
            "harnessrl_engine_dtype_info", "1 for the managed engine's serving dtype", ["dtype"], registry=r
        )
        # Capture health live (store.health reads it per run and model from the store): how each
        # recorded call joined its rollout's graph, by harness. Labels come from a fixed set and the
        # control plane (a rollout's harness), never from what an agent sends: /metrics is open and an
        # agent's model names are unbounded.
        self.turns = Counter(
            "harnessrl_turns",
            "Recorded calls by how they joined their rollout's call graph: extends (the previous turn, exactly), "
            "fork (lost sampled tokens), false_fork (rewrote an earlier prompt), new_root, first, side",
            ["harness", "link"],
            registry=r,
        )
        self.drift_tokens = Counter("harnessrl_drift_tokens", "Sampled tokens lost at forks", ["harness"], registry=r)
        self.traces = Gauge(
            "harnessrl_trace_export_rollouts",
            "Ended rollouts as OpenTelemetry traces: exported (the collector acknowledged them), failed (it "
            "refused or never answered) or dropped (the export queue was full)",
            ["outcome"],
            registry=r,
        )
        self.unknown_roles = Counter(
            "harnessrl_unknown_roles",
            "Recorded chat calls whose prompt token roles are unknown, by capture mode and reason: no_renderer "
            "(no tokenizer and template for the model), render_failed or mismatch (engine capture: the gateway's "
            "rendering raised, or its ids are not the engine's; the call's roles are all unknown), unplaced (a "
            "turn whose contents could not be placed in its rendering: that turn's tokens are unknown)",
            ["capture", "reason"],
            registry=r,
        )
        self._recorded_children: dict[str, tuple] = {}  # dialect -> its labelled calls, latency, tokens
        self._turn_children: dict[tuple[str, str], object] = {}  # (harness, link) -> its counter
        self._role_children: dict[tuple[str, str], object] = {}  # (capture, reason) -> its counter
        self.calls_in_flight = 0  # the gauge's value, readable (the writer commits inline when it is 0)

    def trace_export(self, exported: int, failed: int, dropped: int) -> None:
        self.traces.labels("exported").set(exported)
        self.traces.labels("failed").set(failed)
        self.traces.labels("dropped").set(dropped)

    @contextmanager
    def call_in_flight(self) -> Iterator[None]:
        """An engine call in progress, counted while the block runs."""
        self.in_flight.inc()
        self.calls_in_flight += 1
        try:
            yield
        finally:
            self.calls_in_flight -= 1
            self.in_flight.dec()

    def recorded(self, dialect: str, latency_ms: float, prompt_tokens: int, output_tokens: int) -> None:
        children = self._recorded_children.get(dialect)
        if children is None:  # .labels() costs a lock and a lookup: once per dialect, not per call
            children = self._recorded_children[dialect] = (
                self.calls.labels(dialect, "ok"),
                self.latency.labels(dialect),
                self.tokens_in.labels(dialect),
                self.tokens_out.labels(dialect),
            )
        calls, latency, tokens_in, tokens_out = children
        calls.inc()
        latency.observe(latency_ms / 1000.0)
        tokens_in.inc(prompt_tokens)
        tokens_out.inc(output_tokens)

    def turn(self, harness: str | None, link: str, drift_tokens: int) -> None:
        key = (harness or "", link)
        child = self._turn_children.get(key)
        if child is None:  # as in recorded(): .labels() once per label set, not per call
            child = self._turn_children[key] = self.turns.labels(*key)
        child.inc()
        if drift_tokens:
            self.drift_tokens.labels(harness or "").inc(drift_tokens)

    def roles_unknown(self, capture: str, reason: str) -> None:
        child = self._role_children.get((capture, reason))
        if child is None:  # as in recorded(): every call of a gateway without a tokenizer comes here
            child = self._role_children[(capture, reason)] = self.unknown_roles.labels(capture, reason)
        child.inc()

    def failed(self, path: str, status_code: int, engine_kind: str | None) -> None:
        self.calls.labels(dialect_at(path).name, str(status_code)).inc()
        if engine_kind:
            self.engine_errors.labels(engine_kind).inc()

    def engines(self, engines: list[dict]) -> None:
        """Each engine's state (``EnginePool.engines()``), labelled by its position, never its address."""
        for engine in engines:
            label = str(engine["index"])
            self.engine_healthy.labels(label).set(int(engine["healthy"]))
            self.engine_in_flight.labels(label).set(engine["in_flight"])
            self.engine_queued.labels(label).set(engine["queued"])

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
