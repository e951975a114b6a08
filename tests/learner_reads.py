"""What the learner left in the store, read the way the report and the dashboard read it."""

from __future__ import annotations

from store.store import Store
from store.training import CheckpointRecord


async def stored_steps(store: Store, run: str) -> list[dict]:
    """The run's per-step metrics, in step order (none when the run does not exist)."""
    run_id = await store.listings.run_id(run)
    return [] if run_id is None else [metrics for _, metrics in await store.training.learner_steps(run_id)]


async def stored_checkpoints(store: Store, run: str) -> list[CheckpointRecord]:
    """The run's committed checkpoints, oldest first (none when the run does not exist)."""
    run_id = await store.listings.run_id(run)
    return [] if run_id is None else await store.training.checkpoints(run_id)


def policy_series(exporter, policy: str | None = None) -> dict[tuple[str, str, str], dict[str, float]]:
    """The exporter's per-version mismatch series (of ``policy`` alone when named):
    (harness, model, version) -> {summary key: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    from learner.prometheus import POLICY_GAUGES, PREFIX

    keys = {PREFIX + name: key for key, name, _ in POLICY_GAUGES}
    series: dict[tuple[str, str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families(exporter.exposition().decode()):
        for sample in family.samples:
            if sample.name in keys and policy in (None, sample.labels["policy"]):
                labels = (sample.labels["harness"], sample.labels["model"], sample.labels["version"])
                series.setdefault(labels, {})[keys[sample.name]] = sample.value
    return series


def scrape(port: int) -> dict[str, dict[str, float]]:
    """The learner's endpoint over HTTP, per policy label: {policy: {sample name: value}} (see by_policy)."""
    from tests import http_calls as http

    return by_policy(http.get(f"http://127.0.0.1:{port}/metrics", timeout=60).text)


def by_policy(text: str) -> dict[str, dict[str, float]]:
    """Each policy's step series of an exposition: {policy: {name: value}}, a histogram bucket's name
    with its bound (``..._bucket{le=1.0}``); the per-version mismatch series are policy_series'."""
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if set(sample.labels) - {"policy", "le"}:
                continue
            name = sample.name + (f"{{le={sample.labels['le']}}}" if "le" in sample.labels else "")
            series.setdefault(sample.labels["policy"], {})[name] = sample.value
    return series
