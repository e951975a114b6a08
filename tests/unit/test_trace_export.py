"""OpenTelemetry export: an ended rollout becomes one trace, a root span with a child per call carrying
the GenAI attributes and harnessrl's; the export never holds up the gateway (a stuck collector only
drops spans) and a full queue drops and counts."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.recording.trace_export import MAX_ATTRIBUTE_CHARS, MAX_NAME_CHARS, TraceExport
from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.waiting import until

RUN = "traced"


@pytest.fixture
async def gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    async for harness in start_gateway(gateway_settings(sqlite_db, fake_engine_server.url), fake_engine):
        yield harness


@pytest.fixture
async def exporting(gateway) -> AsyncIterator:
    """Installs an export on the running gateway (serve --otlp-endpoint does it at start), its worker running."""
    workers = []

    def install(exporter: SpanExporter, **options) -> TraceExport:
        export = gateway.state.trace_export = TraceExport(gateway.state.store, exporter, **options)
        workers.append(asyncio.create_task(export.run()))
        return export

    yield install
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)


async def two_turn_rollout(gateway: GatewayHarness, reward: float) -> dict:
    rollout = await gateway.new_rollout(run=RUN, task="weather", meta={"harness": "pi"})
    client = gateway.openai(base_url=f"http://gateway/r/{rollout['token']}/v1", api_key=rollout["token"])
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = await client.chat.completions.create(model="policy", messages=messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Thanks"},
    ]
    await client.chat.completions.create(model="policy", messages=messages)
    ended = await gateway.http.post(
        f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"correct": reward}}
    )
    assert ended.status_code == 200, ended.text
    return rollout


async def test_an_ended_rollout_is_one_trace_of_a_root_and_a_span_per_call(gateway, exporting):
    spans = InMemorySpanExporter()
    export = exporting(spans, processor=SimpleSpanProcessor)
    rollout = await two_turn_rollout(gateway, reward=0.75)
    await until(lambda: export.exported == 1, "the rollout exported")

    finished = spans.get_finished_spans()
    [root] = [s for s in finished if s.parent is None]
    children = sorted((s for s in finished if s.parent is not None), key=lambda s: s.attributes["harnessrl.call.id"])
    assert len(children) == 2 and {s.context.trace_id for s in finished} == {root.context.trace_id}
    assert all(s.parent.span_id == root.context.span_id for s in children)
    assert root.name == "rollout weather"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent" and root.attributes["gen_ai.agent.name"] == "pi"
    assert root.attributes["harnessrl.reward"] == 0.75 and root.attributes["harnessrl.rollout.id"] == rollout["id"]

    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    for span, call in zip(children, calls, strict=True):
        assert span.name == "chat policy"
        attributes = span.attributes
        assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "policy"
        assert attributes["gen_ai.usage.input_tokens"] == call["num_prompt_tokens"]
        assert attributes["gen_ai.usage.output_tokens"] == call["num_output_tokens"]
        assert attributes["gen_ai.response.finish_reasons"] == (call["finish_reason"],)
        assert attributes["gen_ai.response.id"].startswith("chatcmpl")
        assert attributes["harnessrl.policy.version"] == 0 and attributes["harnessrl.call.side"] is False
        assert attributes["harnessrl.policy.name"] == "policy"
        assert root.start_time <= span.start_time <= span.end_time <= root.end_time
    assert children[1].attributes["harnessrl.call.parent_id"] == calls[0]["id"]  # the call graph, as recorded
    assert "harnessrl.call.parent_id" not in children[0].attributes


class StuckCollector(SpanExporter):
    """A collector that never answers (until released): what a down or hung endpoint looks like to the SDK."""

    def __init__(self):
        self.release = threading.Event()

    def export(self, spans) -> SpanExportResult:
        self.release.wait()
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.release.set()


async def test_a_stuck_collector_holds_up_no_call_and_no_rollout(gateway, exporting):
    stuck = StuckCollector()

    def processor(exporter):
        return BatchSpanProcessor(exporter, max_queue_size=4, max_export_batch_size=2, schedule_delay_millis=1)

    export = exporting(stuck, processor=processor)
    try:
        for reward in (0.0, 1.0, 0.5):  # would hang here if anything waited for the collector
            await two_turn_rollout(gateway, reward)
        await until(lambda: export.handed == 3, "three rollouts handed to the SDK")
        assert export.exported == 0  # handed is not exported: the collector acknowledged none
    finally:
        stuck.release.set()
    await until(lambda: export.collector.failed >= 1, "the collector's failure counted")
    metrics = (await gateway.http.get("/metrics")).text
    assert 'harnessrl_trace_export_rollouts{outcome="exported"} 0.0' in metrics


async def test_a_full_export_queue_drops_and_counts_the_rollouts(gateway):
    export = TraceExport(gateway.state.store, InMemorySpanExporter(), queue_size=2)  # no worker: nothing drains
    for rollout_id in range(5):
        export.rollout_ended(rollout_id)
    assert (export.queue.qsize(), export.dropped) == (2, 3)
    gateway.state.trace_export = export
    metrics = (await gateway.http.get("/metrics")).text
    assert 'harnessrl_trace_export_rollouts{outcome="dropped"} 3.0' in metrics


async def test_an_agents_oversized_model_name_is_cut_in_the_span(gateway, exporting):
    spans = InMemorySpanExporter()
    export = exporting(spans, processor=SimpleSpanProcessor)
    rollout = await gateway.new_rollout(run=RUN, task="hostile")
    client = gateway.openai(base_url=f"http://gateway/r/{rollout['token']}/v1", api_key=rollout["token"])
    await client.chat.completions.create(model="m" * 100_000, messages=[{"role": "user", "content": "hi"}])
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished"})
    await until(lambda: export.exported == 1, "the rollout exported")
    [call] = [s for s in spans.get_finished_spans() if s.parent is not None]
    assert call.attributes["gen_ai.request.model"] == "m" * MAX_ATTRIBUTE_CHARS
    assert call.name == "chat " + "m" * MAX_NAME_CHARS
