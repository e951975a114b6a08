"""The learner's Prometheus endpoint: scraped over HTTP while the loop runs, its values are the stored
step metrics (gauges: the latest step; counters: summed over steps; histograms: step and swap times)."""

from __future__ import annotations

import math
import socket

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harnessrl.server import free_port
from learner.config import ConfigError
from learner.config_file import config_from_dict
from learner.loop import LearnerError
from learner.prometheus import COUNTERS, GAUGES, KEEP_VERSIONS, MAX_POLICY_SERIES, PREFIX, LearnerExporter
from store.mismatch import MismatchSummary
from tests import http_calls as http
from tests.learner_reads import policy_series, stored_steps
from tests.unit.test_learner_loop import RUN, config_for, fill, store, train  # noqa: F401 - store is a fixture


def scrape(port: int) -> dict[str, float]:
    """Every sample of the endpoint, by name (the metrics here carry no labels but histogram buckets)."""
    text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=60).text
    return {
        sample.name + (f"{{le={sample.labels['le']}}}" if "le" in sample.labels else ""): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def assert_same(scraped: float, stored) -> None:
    if stored is None:
        assert math.isnan(scraped)
    else:
        assert scraped == pytest.approx(float(stored), rel=1e-12, abs=1e-12)


async def test_the_endpoint_serves_the_stored_step_metrics(store, tiny_model_dir, tmp_path):  # noqa: F811 - the imported fixture
    await fill(store, 6)
    port = free_port()
    scraped: list[dict[str, float]] = []
    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=3, metrics_port=port)

    # Scraped from on_step: the endpoint lives as long as the loop (its server thread answers).
    await train(config, store, on_step=lambda metrics: scraped.append(scrape(port)))

    rows = await stored_steps(store, RUN)
    assert len(scraped) == len(rows) == 3
    for seen, upto in zip(scraped, range(1, 4)):
        last, done = rows[upto - 1], rows[:upto]
        for key, name, _ in GAUGES:
            assert_same(seen[PREFIX + name], last[key])
        for key, name, _ in COUNTERS:
            assert seen[PREFIX + name + "_total"] == sum(row[key] or 0 for row in done), name
        assert seen[PREFIX + "step_time_seconds_count"] == upto
        assert seen[PREFIX + "step_time_seconds_sum"] == pytest.approx(sum(row["step_time_s"] for row in done))
        assert seen[PREFIX + "swap_time_seconds_count"] == 0  # publish = false: nothing swapped
    final = scraped[-1]
    assert final[PREFIX + "step"] == 3 and final[PREFIX + "policy_version"] == 2
    assert final[PREFIX + "samples_trained_total"] == 24 and final[PREFIX + "groups_consumed_total"] == 6
    with pytest.raises(httpx.ConnectError):  # the loop closed it on the way out
        scrape(port)


def test_missing_values_read_as_nan_and_swaps_feed_their_histogram():
    exporter = LearnerExporter()
    exporter.observe(
        {"step": 4, "loss": None, "samples": 3, "step_time_s": 1.5, "swap_time_s": 0.2, "optimizer_stepped": False}
    )
    exporter.observe({"step": 5, "loss": 0.25, "samples": None, "step_time_s": 2.5, "swap_time_s": None})
    seen = {
        s.name: s.value
        for f in text_string_to_metric_families(exporter.exposition().decode())
        for s in f.samples
        if "le" not in s.labels
    }
    assert seen[PREFIX + "step"] == 5 and seen[PREFIX + "loss"] == 0.25 and math.isnan(seen[PREFIX + "kl"])
    assert seen[PREFIX + "samples_trained_total"] == 3 and seen[PREFIX + "step_time_seconds_sum"] == 4.0
    assert seen[PREFIX + "swap_time_seconds_count"] == 1 and seen[PREFIX + "swap_time_seconds_sum"] == 0.2


async def test_a_taken_port_is_an_error_naming_the_setting(store, tiny_model_dir, tmp_path):  # noqa: F811 - the imported fixture
    await fill(store, 2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = config_for(tiny_model_dir, tmp_path / "out", max_steps=1, metrics_port=taken.getsockname()[1])
        with pytest.raises(LearnerError, match="set metrics_port to a free port, or 0"):
            await train(config, store)
    with pytest.raises(ConfigError, match="metrics_port must be a TCP port"):
        config_from_dict({"metrics_port": 70000})


def test_quarantined_groups_are_counted():
    exporter = LearnerExporter()
    exporter.observe({"groups_quarantined": 2})
    exporter.observe({"groups_quarantined": 1})
    text = exporter.exposition().decode()
    assert f"{PREFIX}groups_quarantined_total 3.0" in text


def summary(harness: str, model: str, version: int, mean_abs: float = 0.01) -> MismatchSummary:
    return MismatchSummary(harness, model, version, 1, 8, mean_abs, mean_abs, mean_abs / 2, 0.0)


def test_per_policy_mismatch_keeps_the_latest_versions_and_bounded_label_sets():
    exporter = LearnerExporter()
    for version in range(1, KEEP_VERSIONS + 3):
        exporter.policy_mismatch([summary("pi", "policy", version, mean_abs=version / 100)])
    series = policy_series(exporter)
    kept = list(range(3, KEEP_VERSIONS + 3))
    assert sorted(int(v) for _, _, v in series) == kept  # the two oldest versions' series were removed
    assert series[("pi", "policy", str(kept[-1]))]["mean_abs"] == pytest.approx(kept[-1] / 100)

    # an agent that names a new model per call gets MAX_POLICY_SERIES pairs, then "other"
    exporter.policy_mismatch([summary("pi", f"m{k}", 99) for k in range(MAX_POLICY_SERIES + 5)])
    models = {model for _, model, version in policy_series(exporter) if version == "99"}
    assert len(models) == MAX_POLICY_SERIES and "other" in models and "m40" not in models
