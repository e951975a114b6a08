"""The quickstart's live table: the rounds it shows are the ones its reward curve plots, and the learner's
steps come from the store's one reader of them."""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator

import pytest
from rich.console import Console

from gateway.store.store import Store
from gateway.store.training import record_step
from harnesses.runner import RolloutResult
from harnessrl.dashboard import TABLE_ROUNDS, Dashboard, step_rows

RUN = "dash"


@pytest.fixture
async def store(sqlite_db: str) -> AsyncIterator[Store]:
    store = Store.from_url(sqlite_db)
    yield store
    await store.close()


def dashboard_with_rounds(rounds: int) -> Dashboard:
    dashboard = Dashboard(RUN)
    for round_ in range(rounds):
        for index in range(2):
            dashboard.add_result(round_, RolloutResult("t", index, round_ * 2 + index, "finished", round_ / rounds))
    return dashboard


def rendered_rounds(dashboard: Dashboard) -> list[str]:
    console = Console(width=200, record=True)
    console.print(dashboard.render())
    lines = console.export_text().splitlines()
    return [line.split("│")[1].strip() for line in lines if line.startswith("│") and "now" not in line]


def test_the_table_shows_every_round_the_curve_plots_from_round_zero():
    dashboard = dashboard_with_rounds(9)
    assert (
        rendered_rounds(dashboard) == [str(r) for r in range(9)] == [str(r) for r in sorted(dashboard.rewards_by_round)]
    )


def test_a_long_run_keeps_the_first_round_and_the_latest_ones():
    dashboard = dashboard_with_rounds(TABLE_ROUNDS + 5)
    shown = rendered_rounds(dashboard)
    latest = [str(r) for r in range(TABLE_ROUNDS + 5 - (TABLE_ROUNDS - 1), TABLE_ROUNDS + 5)]
    assert shown == ["0", "…", *latest]


async def test_step_rows_are_the_stored_steps_of_the_run(store):
    assert await step_rows(store, RUN) == []  # no such run yet: nothing, not an error
    identity = await store.create_rollout(RUN, "t", None)
    run_id = (await store.get_rollout(identity.rollout_id))[0].run_id
    await record_step(store, run_id, 2, {"loss": 0.5})
    await record_step(store, run_id, 1, {"loss": 0.7})
    await record_step(store, run_id, 1, {"loss": 0.6})  # a replayed step overwrites its row
    rows = await step_rows(store, RUN)
    assert rows == [{"step": 1, "loss": 0.6}, {"step": 2, "loss": 0.5}]
    assert statistics.fmean(r["loss"] for r in rows) == pytest.approx(0.55)
