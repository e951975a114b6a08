"""Prometheus metrics: calls by dialect and status, tokens, latency, policy version."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import chat_body


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_count_calls_tokens_and_failures(gateway):
    ok = await gateway.http.post("/v1/chat/completions", json=chat_body())
    await gateway.http.post("/v1/chat/completions", json=chat_body(temperature="hot"))
    await gateway.http.post("/v1/chat/completions", json=chat_body("y" * 3000))  # over the engine's limit
    found = samples((await gateway.http.get("/metrics")).text)
    assert found[("harnessrl_calls_total", (("dialect", "chat"), ("status", "ok")))] == 1
    assert found[("harnessrl_calls_total", (("dialect", "chat"), ("status", "400")))] == 2
    assert found[("harnessrl_engine_errors_total", (("kind", "engine_error"),))] == 1
    usage = ok.json()["usage"]
    assert found[("harnessrl_output_tokens_total", (("dialect", "chat"),))] == usage["completion_tokens"]
    assert found[("harnessrl_prompt_tokens_total", (("dialect", "chat"),))] == usage["prompt_tokens"]
    assert found[("harnessrl_engine_latency_seconds_count", (("dialect", "chat"),))] == 1
    assert found[("harnessrl_calls_in_flight", ())] == 0
    assert found[("harnessrl_policy_version", ())] == 0
