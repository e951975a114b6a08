"""The learner's Prometheus endpoint: scraped over HTTP while the loop runs, its values are the stored
step metrics (gauges: the latest step; counters: summed over steps; histograms: step and swap times),
every series under the policy's label, a lone learner's too; several policies' sinks share one endpoint."""

from __future__ import annotations

import math
import socket

import httpx
import pytest

from harnessrl.server import free_port
from learner.config import ConfigError, LearnerConfig
from learner.loop import LearnerError, serve_exporter
from learner.metrics import MetricsSink
from learner.prometheus import COUNTERS, GAUGES, KEEP_VERSIONS, MAX_POLICY_SERIES, PREFIX, LearnerExporter
from store.mismatch import MismatchSummary
from store.policies import DEFAULT_POLICY
from tests.learner_policies import fill_run
from tests.learner_reads import by_policy, policy_series, scrape, stored_steps
from tests.unit.test_learner_loop import RUN, config_for, fill, store, train  # noqa: F401 - store is a fixture


def series(exporter: LearnerExporter, policy: str) -> dict[str, float]:
    """``policy``'s step series of the exporter, buckets left out."""
    return {
        name: value for name, value in by_policy(exporter.exposition().decode())[policy].items() if "le=" not in name
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
    assert {policy for seen in scraped for policy in seen} == {DEFAULT_POLICY}  # alone, still labelled
    for seen, upto in zip((s[DEFAULT_POLICY] for s in scraped), range(1, 4)):
        last, done = rows[upto - 1], rows[:upto]
        for key, name, _ in GAUGES:
            assert_same(seen[PREFIX + name], last[key])
        for key, name, _ in COUNTERS:
            assert seen[PREFIX + name + "_total"] == sum(row[key] or 0 for row in done), name
        assert seen[PREFIX + "step_time_seconds_count"] == upto
        assert seen[PREFIX + "step_time_seconds_sum"] == pytest.approx(sum(row["step_time_s"] for row in done))
        assert seen[PREFIX + "swap_time_seconds_count"] == 0  # publish = false: nothing swapped
    final = scraped[-1][DEFAULT_POLICY]
    assert final[PREFIX + "training"] == 1 and final[PREFIX + "failed"] == 0
    assert final[PREFIX + "step"] == 3 and final[PREFIX + "policy_version"] == 2
    assert final[PREFIX + "samples_trained_total"] == 24 and final[PREFIX + "groups_consumed_total"] == 6
    with pytest.raises(httpx.ConnectError):  # the loop closed it on the way out
        scrape(port)


def test_missing_values_read_as_nan_and_swaps_feed_their_histogram():
    exporter = LearnerExporter()
    exporter.policy("ada").observe(
        {"step": 4, "loss": None, "samples": 3, "step_time_s": 1.5, "swap_time_s": 0.2, "optimizer_stepped": False}
    )
    exporter.policy("ada").observe({"step": 5, "loss": 0.25, "samples": None, "step_time_s": 2.5, "swap_time_s": None})
    seen = series(exporter, "ada")
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
        with pytest.raises(LearnerError, match=f"127.0.0.1:{taken.getsockname()[1]}: .*--metrics-port PORT"):
            serve_exporter(taken.getsockname()[1])  # the several policies' learner's endpoint, as alone
    with pytest.raises(ConfigError, match="metrics_port: Input should be less than or equal to 65535"):
        LearnerConfig().updated(metrics_port=70000)


def test_quarantined_groups_are_counted():
    exporter = LearnerExporter()
    exporter.policy("ada").observe({"groups_quarantined": 2})
    exporter.policy("ada").observe({"groups_quarantined": 1})
    text = exporter.exposition().decode()
    assert f'{PREFIX}groups_quarantined_total{{policy="ada"}} 3.0' in text


def summary(harness: str, model: str, version: int, mean_abs: float = 0.01) -> MismatchSummary:
    return MismatchSummary(harness, model, version, 1, 8, mean_abs, mean_abs, mean_abs / 2, 0.0)


def test_per_policy_mismatch_keeps_the_latest_versions_and_bounded_label_sets():
    exporter = LearnerExporter()
    ada = exporter.policy("ada")
    for version in range(1, KEEP_VERSIONS + 3):
        ada.policy_mismatch([summary("pi", "policy", version, mean_abs=version / 100)])
    exporter.policy("bob").policy_mismatch([summary("pi", "policy", 1, mean_abs=0.5)])
    kept_series = policy_series(exporter, "ada")
    kept = list(range(3, KEEP_VERSIONS + 3))
    assert sorted(int(v) for _, _, v in kept_series) == kept  # the two oldest versions' series were removed
    assert kept_series[("pi", "policy", str(kept[-1]))]["mean_abs"] == pytest.approx(kept[-1] / 100)
    # another policy's versions are its own: its v1 stays, ada's v1 went
    assert policy_series(exporter, "bob")[("pi", "policy", "1")]["mean_abs"] == 0.5

    # an agent that names a new model per call gets MAX_POLICY_SERIES pairs, then "other"
    ada.policy_mismatch([summary("pi", f"m{k}", 99) for k in range(MAX_POLICY_SERIES + 5)])
    models = {model for _, model, version in policy_series(exporter, "ada") if version == "99"}
    assert len(models) == MAX_POLICY_SERIES and "other" in models and "m40" not in models


async def test_two_policies_sinks_feed_two_labelled_series_on_one_endpoint(store):  # noqa: F811 - the imported fixture
    for seed, run in enumerate(("ada", "bob")):
        await fill_run(store, run, 1, seed=10 * seed)  # each run of a policy named as it
    exporter = LearnerExporter()
    port = exporter.serve(0)
    sinks = {
        run: MetricsSink(store, await store.listings.run_id(run), None, exporter.policy(run)) for run in ("ada", "bob")
    }
    try:
        await sinks["ada"].record(1, {"step": 1, "loss": 0.5, "samples": 4, "step_time_s": 1.0})
        await sinks["bob"].record(1, {"step": 1, "loss": 0.25, "samples": 2, "step_time_s": 2.0})
        await sinks["bob"].record(2, {"step": 2, "loss": 0.125, "samples": 3, "step_time_s": 2.0})
        for sink in sinks.values():
            sink.close()  # a policy's sink closing leaves the process's endpoint up
        seen = scrape(port)
    finally:
        exporter.close()

    assert set(seen) == {"ada", "bob"}
    ada, bob = seen["ada"], seen["bob"]
    assert (ada[PREFIX + "step"], ada[PREFIX + "loss"], ada[PREFIX + "samples_trained_total"]) == (1, 0.5, 4)
    assert (bob[PREFIX + "step"], bob[PREFIX + "loss"], bob[PREFIX + "samples_trained_total"]) == (2, 0.125, 5)
    assert ada[PREFIX + "step_time_seconds_count"] == 1 and bob[PREFIX + "step_time_seconds_sum"] == 4.0
    assert [row["step"] for row in await stored_steps(store, "bob")] == [1, 2]  # stored as before


def test_a_stopped_policy_keeps_its_last_values_and_says_it_no_longer_trains():
    exporter = LearnerExporter()
    exporter.policy("ada").observe({"step": 3, "loss": 0.5, "samples": 4})
    exporter.policy("bob").observe({"step": 7, "loss": 0.25, "samples": 2})
    assert series(exporter, "ada")[PREFIX + "training"] == 1

    exporter.policy("ada").ended(failed=False)  # its max_steps
    exporter.policy("bob").ended(failed=True)  # its error

    ada, bob = series(exporter, "ada"), series(exporter, "bob")
    assert (ada[PREFIX + "step"], ada[PREFIX + "loss"], ada[PREFIX + "samples_trained_total"]) == (3, 0.5, 4)
    assert (ada[PREFIX + "training"], ada[PREFIX + "failed"]) == (0, 0)
    assert (bob[PREFIX + "step"], bob[PREFIX + "training"], bob[PREFIX + "failed"]) == (7, 0, 1)
