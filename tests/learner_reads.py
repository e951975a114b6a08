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


def policy_series(exporter) -> dict[tuple[str, str, str], dict[str, float]]:
    """The exporter's per-policy mismatch series: (harness, model, version) -> {summary key: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    from learner.prometheus import POLICY_GAUGES, PREFIX

    keys = {PREFIX + name: key for key, name, _ in POLICY_GAUGES}
    series: dict[tuple[str, str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families(exporter.exposition().decode()):
        for sample in family.samples:
            if sample.name in keys:
                labels = (sample.labels["harness"], sample.labels["model"], sample.labels["version"])
                series.setdefault(labels, {})[keys[sample.name]] = sample.value
    return series
