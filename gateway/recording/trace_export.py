"""OpenTelemetry export: each ended rollout as a trace, each model call a span (GenAI conventions).

``serve --otlp-endpoint URL`` (off by default) sends traces over OTLP/HTTP to any collector (Arize
Phoenix, Jaeger, an OpenTelemetry Collector). Nothing happens on the call path: when a rollout ends its
id goes into a bounded queue (full: the rollout is dropped and counted, never waited for); a worker
reads the rollout and its calls from the store (``store.traces``) and hands the spans to the
SDK's batch processor, whose own bounded queue and thread do the network (a collector that is down
costs dropped spans, not latency).

A trace: the root span ``rollout {task}`` (``gen_ai.operation.name`` ``invoke_agent``, the harness as
``gen_ai.agent.name``, reward and status) from the rollout's creation to its end; under it one span per
call from its request to its recorded answer, with ``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``,
``gen_ai.usage.input_tokens``/``output_tokens`` and the sampling, plus ``harnessrl.*`` attributes:
rollout and call ids, the call-graph parent and fork, policy version, adapter digest, source, side-call
tags, whether the client retried it, and the train/inference mismatch once the learner trained it.
The OpenInference attributes Phoenix draws (span kind, model name, token counts) ride along.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from store.records import CallTag
from store.store import Store
from store.traces import RolloutTrace, TracedCall

logger = logging.getLogger(__name__)

QUEUED_ROLLOUTS = 4096  # ended rollouts waiting for export; more are dropped and counted
SPAN_QUEUE = 65_536  # the SDK's queue of finished spans (dropped beyond, in its thread)
EXPORT_TIMEOUT_S = 10.0
SERVICE_NAME = "harnessrl-gateway"
# An agent names its model (gen_ai.request.model) and the harness its side calls: cut what they send.
MAX_ATTRIBUTE_CHARS = 1024
MAX_NAME_CHARS = 128  # of the model name in a span's name (span names are not limited by the SDK)
OPERATIONS = {"completions": "text_completion"}  # every other dialect is a chat


@dataclass(frozen=True)
class SpanData:
    """A span to emit (pure data: what ``rollout_spans`` makes and the tests read)."""

    name: str
    start: datetime
    end: datetime
    attributes: dict[str, str | int | float | bool | tuple[str, ...]]
    parent: int | None  # index of the parent span in the list (None: the root)
    error: str | None = None  # the span's status is ERROR with this description


def rollout_spans(trace_: RolloutTrace) -> list[SpanData]:
    """The root span, then one span per call, all children of the root (pure)."""
    end = trace_.ended_at or max((c.recorded_at for c in trace_.calls), default=trace_.started_at)
    root = SpanData(
        f"rollout {trace_.task}",
        trace_.started_at,
        end,
        _without_none(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": trace_.harness,
                "openinference.span.kind": "AGENT",
                "harnessrl.run": trace_.run,
                "harnessrl.task": trace_.task,
                "harnessrl.rollout.id": trace_.rollout_id,
                "harnessrl.group.id": trace_.group_id,
                "harnessrl.rollout.status": trace_.status,
                "harnessrl.reward": trace_.reward,
                "harnessrl.calls": len(trace_.calls),
            }
        ),
        None,
        trace_.error if trace_.status == "failed" else None,
    )
    return [root, *(_call_span(trace_.rollout_id, call) for call in trace_.calls)]


def _call_span(rollout_id: int, call: TracedCall) -> SpanData:
    operation = OPERATIONS.get(call.dialect, "chat")
    side = tuple(t for t in call.tags if t not in (CallTag.RETRIED, CallTag.UNDELIVERED))
    attributes = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "vllm",
        "gen_ai.system": "vllm",
        "gen_ai.request.model": call.model,
        "gen_ai.response.model": call.engine_model,
        "gen_ai.response.id": call.response_id,
        "gen_ai.response.finish_reasons": (call.finish_reason,) if call.finish_reason else None,
        "gen_ai.usage.input_tokens": call.input_tokens,
        "gen_ai.usage.output_tokens": call.output_tokens,
        "gen_ai.request.temperature": call.temperature,
        "gen_ai.request.top_p": call.top_p,
        "openinference.span.kind": "LLM",
        "llm.model_name": call.engine_model,
        "llm.token_count.prompt": call.input_tokens,
        "llm.token_count.completion": call.output_tokens,
        "llm.token_count.total": call.input_tokens + call.output_tokens,
        "harnessrl.rollout.id": rollout_id,
        "harnessrl.call.id": call.call_id,
        "harnessrl.call.parent_id": call.parent_id,
        "harnessrl.call.fork_of": call.fork_of,
        "harnessrl.call.dialect": call.dialect,
        "harnessrl.call.source": call.source,
        "harnessrl.call.side": bool(side),
        "harnessrl.call.tags": call.tags or None,
        "harnessrl.call.retried": CallTag.RETRIED in call.tags,
        "harnessrl.call.undelivered": CallTag.UNDELIVERED in call.tags,
        "harnessrl.policy.name": call.policy,
        "harnessrl.policy.version": call.policy_version,
        "harnessrl.adapter.digest": call.adapter_digest,
        "harnessrl.mismatch.mean_abs": call.mismatch_mean_abs,
    }
    start = datetime.fromtimestamp(call.recorded_at.timestamp() - call.latency_ms / 1000.0, call.recorded_at.tzinfo)
    return SpanData(f"{operation} {call.model[:MAX_NAME_CHARS]}", start, call.recorded_at, _without_none(attributes), 0)


def _without_none(attributes: dict) -> dict:
    return {
        k: (tuple(str(x) for x in v) if isinstance(v, tuple) else v) for k, v in attributes.items() if v is not None
    }


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


class AcknowledgedExporter(SpanExporter):
    """``exporter``, counting the rollouts (root spans) the collector acknowledged and those it refused or
    never answered: handing spans to the SDK is no export (its queue drops, a collector may be down)."""

    def __init__(self, exporter: SpanExporter):
        self.exporter = exporter
        self.acknowledged = 0  # rollouts
        self.failed = 0  # rollouts
        self._lock = threading.Lock()  # the SDK exports on its own thread

    def export(self, spans) -> SpanExportResult:
        result = self.exporter.export(spans)
        rollouts = sum(1 for span in spans if span.parent is None)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.acknowledged += rollouts
            else:
                self.failed += rollouts
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def batch_processor(exporter: SpanExporter) -> SpanProcessor:
    return BatchSpanProcessor(exporter, max_queue_size=SPAN_QUEUE, export_timeout_millis=10_000)


class TraceExport:
    """Ended rollouts -> traces, through ``processor`` (default: the SDK's batch processor) on ``exporter``.
    ``rollout_ended`` never waits; ``run`` is the worker; ``close`` flushes briefly."""

    def __init__(
        self,
        store: Store,
        exporter: SpanExporter,
        processor: Callable[[SpanExporter], SpanProcessor] = batch_processor,
        queue_size: int = QUEUED_ROLLOUTS,
    ):
        self.store = store
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": SERVICE_NAME}),
            span_limits=SpanLimits(max_attribute_length=MAX_ATTRIBUTE_CHARS),
        )
        self.collector = AcknowledgedExporter(exporter)
        self.provider.add_span_processor(processor(self.collector))
        self.tracer = self.provider.get_tracer("harnessrl.gateway")
        self.queue: asyncio.Queue[int] = asyncio.Queue(queue_size)
        self.handed = 0  # rollouts handed to the processor (exported once the collector acknowledges them)
        self.dropped = 0  # rollouts never exported: the queue was full

    @property
    def exported(self) -> int:
        """Rollouts the collector acknowledged."""
        return self.collector.acknowledged

    @classmethod
    def otlp(cls, store: Store, endpoint: str) -> TraceExport:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls(store, OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S))

    def rollout_ended(self, rollout_id: int) -> None:
        try:
            self.queue.put_nowait(rollout_id)
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self) -> None:
        while True:
            rollout_id = await self.queue.get()
            try:
                found = await self.store.traces.of_rollout(rollout_id)
                if found is not None:
                    self.emit(rollout_spans(found))
                    self.handed += 1
            except Exception:  # noqa: BLE001 - one rollout that cannot be read must not stop the export
                logger.exception("exporting rollout %d as a trace", rollout_id)

    def emit(self, spans: list[SpanData]) -> None:
        made: list[trace.Span] = []
        for data in spans:
            context = None if data.parent is None else trace.set_span_in_context(made[data.parent])
            kind = SpanKind.INTERNAL if data.parent is None else SpanKind.CLIENT
            span = self.tracer.start_span(
                data.name, context=context, kind=kind, attributes=data.attributes, start_time=_ns(data.start)
            )
            if data.error is not None:
                span.set_status(Status(StatusCode.ERROR, data.error[:500]))
            made.append(span)
        for span, data in zip(reversed(made), reversed(spans), strict=True):  # children end before the root
            span.end(end_time=_ns(data.end))

    async def close(self) -> None:
        """Flush what is queued (bounded: a collector that is down does not hold the shutdown)."""
        await asyncio.to_thread(self.provider.force_flush, int(EXPORT_TIMEOUT_S * 1000))
        await asyncio.to_thread(self.provider.shutdown)
