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
    assert found[("harnessrl_policy_version", (("policy", "policy"),))] == 0


def test_a_step_that_trained_on_something_needs_no_reason():
    from learner.metrics import why_nothing_trained

    assert why_nothing_trained({"samples": 3, "groups_zero_std": 1}) is None


def test_every_reason_a_step_kept_nothing_is_named_with_its_count():
    from learner.metrics import why_nothing_trained

    said = why_nothing_trained(
        {"samples": 0, "groups": 3, "groups_zero_std": 1, "samples_stale": 2, "groups_quarantined": 1}
    )
    assert said == (
        "trained on nothing of its 3 groups: 1 group had zero reward spread (every rollout scored the same); "
        "2 samples were older than max_staleness; 1 group could not be read and was quarantined"
    )
    # a zero-spread group's samples were scored: they lack an advantage, not a reward
    said = why_nothing_trained({"samples": 0, "groups": 4, "groups_zero_std": 4, "samples_unscored": 16})
    assert said.endswith("16 samples had no advantage (a group without reward spread, or no reward)")
