"""`harnessrl report`: the numbers read from the store equal an independent computation over the rows,
and every plot is a real image; a run without learner steps still gets its generation plots."""

from __future__ import annotations

import asyncio
import math
import statistics
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.reports.curves import PIXELS, write_report
from learner.metrics import MetricsSink
from store.reports import bucket_width_s
from store.store import Store
from store.tables import Call, Rollout, Run
from tests.builders import call_record
from tests.images import assert_plot_image

RUN = "report-run"
START = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
PLOTS = (
    "reward_per_step",
    "reward_per_version",
    "staleness",
    "generation_throughput",
    "training_throughput",
    "train_inference_mismatch",
)


@pytest.fixture
async def store(sqlite_db: str) -> AsyncIterator[Store]:
    store = Store.from_url(sqlite_db)
    yield store
    await store.close()


async def add_rollout(
    store: Store,
    run: str,
    task: str,
    reward: float | None,
    calls: list[tuple[int, int, float]],
    group_size: int = 4,
    group: str | None = None,
) -> int:
    """A rollout with one call per (policy_version, output tokens, seconds after START)."""
    identity = await store.create_rollout(run, task, group, group_size=group_size)
    ids = await store.insert_calls(
        [
            call_record(identity.rollout_id, policy_version=version, output_ids=[7] * n, output_logprobs=[-0.1] * n)
            for version, n, _ in calls
        ]
    )
    async with store.sessions.begin() as session:
        for call_id, (_, _, at_s) in zip(ids, calls):
            await session.execute(
                update(Call).where(Call.id == call_id).values(created_at=START + timedelta(seconds=at_s))
            )
    if reward is not None:
        await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": reward})
    return identity.rollout_id


async def build_run(store: Store, steps: int = 6) -> None:
    """Rollouts over 10 minutes at policy versions 0..2, plus learner steps with known metrics."""
    rng = np.random.default_rng(0)
    for k in range(24):
        version = k // 8
        at = float(k * 25 + rng.uniform(0, 5))
        calls = [(version, int(rng.integers(3, 40)), at)]
        if k % 5 == 0:  # a second turn, served after the next hot swap: the rollout stays pinned to the first
            calls.append((version + 1, int(rng.integers(3, 40)), at + 7.5))
        await add_rollout(
            store, RUN, f"task-{k % 4}", float(rng.choice([0.0, 0.5, 1.0])), calls, group=f"round-{k // 16}"
        )  # a group takes its 4 rollouts, no more
    await add_rollout(store, RUN, "unscored", None, [(0, 11, 3.0)])  # counts for throughput, not reward
    await add_rollout(store, "other-run", "t", 1.0, [(0, 99, 1.0)])  # another run: never counted
    run_id = await run_id_of(store, RUN)
    sink = MetricsSink(store, run_id, None)
    for step in range(1, steps + 1):
        await sink.record(step, step_metrics(step))


def step_metrics(step: int) -> dict:
    return {
        "step": step,
        "version": step - 1,
        "reward_mean": 0.1 * step,
        "reward_mean_kept": 0.1 * step + 0.05,
        "staleness_mean": 0.5 + 0.1 * step,
        "staleness_max": step % 3,
        "samples": 8 + step,
        "tokens_trained": 100 * step,
        "step_time_s": 2.0 + step,
        "loss": None,
        # step 1 compared none of its own version's tokens; step 6 crossed the alarm
        "mismatch_mean_abs": None if step == 1 else 1e-3 * step,
        "mismatch_max_abs": None if step == 1 else 1e-2 * step,
        "mismatch_alarmed": step == 6,
    }


async def run_id_of(store: Store, run: str) -> int:
    async with store.sessions() as session:
        return await session.scalar(select(Run.id).where(Run.name == run))


async def rows_of(store: Store, run: str) -> tuple[list, list]:
    """Every call (rollout id, version, output tokens, created_at) and rollout (id, reward) of the run."""
    run_id = await run_id_of(store, run)
    async with store.sessions() as session:
        calls = (
            await session.execute(
                select(Call.rollout_id, Call.policy_version, Call.num_output_tokens, Call.created_at)
                .join(Rollout, Rollout.id == Call.rollout_id)
                .where(Rollout.run_id == run_id)
            )
        ).all()
        rollouts = (await session.execute(select(Rollout.id, Rollout.reward).where(Rollout.run_id == run_id))).all()
    return calls, rollouts


# --- the numbers -------------------------------------------------------------------------------


async def test_reward_per_version_equals_a_direct_computation(store):
    await build_run(store)
    calls, rollouts = await rows_of(store, RUN)
    pinned: dict[int, int] = {}
    for rollout_id, version, _, _ in calls:
        pinned[rollout_id] = min(version, pinned.get(rollout_id, version))
    by_version = defaultdict(list)
    for rollout_id, reward in rollouts:
        if reward is not None:
            by_version[pinned[rollout_id]].append(reward)

    data = await store.reports.gather(RUN)

    assert [v.version for v in data.versions] == sorted(by_version) == [0, 1, 2]
    for v in data.versions:
        rewards = by_version[v.version]
        assert v.rollouts == len(rewards) == 8
        assert v.reward_mean == pytest.approx(statistics.fmean(rewards))
        assert v.reward_std == pytest.approx(statistics.pstdev(rewards), abs=1e-9)
        assert v.stderr == pytest.approx(statistics.pstdev(rewards) / math.sqrt(len(rewards)), abs=1e-9)


async def test_generation_throughput_equals_a_direct_bucketing(store):
    await build_run(store)
    calls, _ = await rows_of(store, RUN)
    times = [created.replace(tzinfo=UTC) if created.tzinfo is None else created for *_, created in calls]
    first = min(times)
    width = bucket_width_s((max(times) - first).total_seconds())
    expected_tokens, expected_calls = defaultdict(int), defaultdict(int)
    for (_, _, tokens, _), at in zip(calls, times):
        k = int((at - first).total_seconds() // width)
        expected_tokens[k] += tokens
        expected_calls[k] += 1

    gen = (await store.reports.gather(RUN)).generation

    assert gen.bucket_s == width == 15  # ~610 s of calls: the smallest round width giving <= 40 buckets
    assert len(gen.tokens) == max(expected_tokens) + 1
    assert list(gen.tokens) == [expected_tokens[k] for k in range(len(gen.tokens))]
    assert list(gen.calls) == [expected_calls[k] for k in range(len(gen.calls))]
    assert 0 in gen.calls  # quiet buckets are kept as zeros
    assert sum(gen.tokens) == sum(tokens for _, _, tokens, _ in calls)
    assert gen.tokens_per_min[0] == pytest.approx(gen.tokens[0] * 60 / 15)
    assert gen.minutes[:3] == (0.0, 0.25, 0.5)


async def test_step_points_carry_the_stored_step_metrics(store):
    await build_run(store)
    data = await store.reports.gather(RUN)
    assert [p.step for p in data.steps] == [1, 2, 3, 4, 5, 6]
    for p in data.steps:
        m = step_metrics(p.step)
        assert (p.reward_mean, p.reward_mean_kept, p.staleness_mean, p.staleness_max) == (
            m["reward_mean"],
            m["reward_mean_kept"],
            m["staleness_mean"],
            m["staleness_max"],
        )
        assert p.samples == m["samples"] and p.trained_tokens_per_s == pytest.approx(100 * p.step / (2.0 + p.step))
        assert (p.mismatch_mean_abs, p.mismatch_max_abs, p.mismatch_alarmed) == (
            m["mismatch_mean_abs"],
            m["mismatch_max_abs"],
            m["mismatch_alarmed"],
        )


def test_bucket_widths_are_round_and_bounded():
    assert bucket_width_s(0) == 5 and bucket_width_s(200) == 5 and bucket_width_s(201) == 10
    assert bucket_width_s(14 * 60) == 30 and bucket_width_s(10 * 86400) == 21600
    assert bucket_width_s(1e9) == 86400


# --- the images --------------------------------------------------------------------------------


async def test_every_plot_is_a_real_image(store, tmp_path):
    await build_run(store)
    result = write_report(await store.reports.gather(RUN), tmp_path / "report")
    assert result.notes == ()
    assert [p.name for p in result.paths] == [f"{name}.png" for name in PLOTS]
    for path in result.paths:
        assert_plot_image(path, PIXELS)


def invoke(*args: str):
    """The CLI runs its own event loop: off this test's loop."""
    return asyncio.to_thread(CliRunner().invoke, app, list(args))


async def test_the_cli_writes_the_plots_and_prints_their_paths(store, sqlite_db, tmp_path):
    await build_run(store)
    out = tmp_path / "cli"
    result = await invoke("report", "--run", RUN, "--out", str(out), "--database-url", sqlite_db)
    assert result.exit_code == 0, result.output
    for name in PLOTS:
        assert str(out / f"{name}.png") in result.output
        assert_plot_image(out / f"{name}.png", PIXELS)


async def test_a_run_without_learner_steps_gets_its_generation_plots_and_a_note(store, sqlite_db, tmp_path):
    await build_run(store, steps=0)
    out = tmp_path / "no-steps"
    result = await invoke("report", "--run", RUN, "--out", str(out), "--database-url", sqlite_db)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["generation_throughput.png", "reward_per_version.png"]
    assert result.output.count("no learner steps yet") == 3 and f"harnessrl train --run {RUN}" in result.output
    assert "Traceback" not in result.output


async def test_a_run_without_calls_gets_notes_only(store, tmp_path):
    await store.create_rollout("empty-run", "t")
    result = write_report(await store.reports.gather("empty-run"), tmp_path / "empty")
    assert result.paths == () and len(result.notes) == 6
    assert any("no recorded calls" in note for note in result.notes)


async def test_an_unknown_run_names_the_known_ones(store, sqlite_db, tmp_path):
    await build_run(store, steps=1)
    result = await invoke("report", "--run", "nope", "--out", str(tmp_path), "--database-url", sqlite_db)
    assert result.exit_code == 1
    assert "no run named 'nope'" in result.output and RUN in result.output and "other-run" in result.output
    assert "harnessrl ls runs" in result.output
