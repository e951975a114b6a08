"""The quickstart's terminal table: the rounds it shows are the ones its reward curve plots, and the learner's
steps come from the store's one reader of them."""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator

import matplotlib.colors
import numpy as np
import pytest
from rich.console import Console

from harnessrl.training.dashboard import TABLE_ROUNDS, Dashboard, save_reward_curve, step_rows, version_rewards
from rollouts.run_plan import RolloutResult
from store.reports import VersionReward
from store.store import Store
from tests.images import assert_plot_image

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
    assert await version_rewards(store, RUN) == []
    identity = await store.create_rollout(RUN, "t", None)
    run_id = (await store.get_rollout(identity.rollout_id))[0].run_id
    await store.training.record_step(run_id, 2, {"loss": 0.5})
    await store.training.record_step(run_id, 1, {"loss": 0.7})
    await store.training.record_step(run_id, 1, {"loss": 0.6})  # a replayed step overwrites its row
    rows = await step_rows(store, RUN)
    assert rows == [{"step": 1, "loss": 0.6}, {"step": 2, "loss": 0.5}]
    assert statistics.fmean(r["loss"] for r in rows) == pytest.approx(0.55)


def eval_metrics(version: int, pass_at_1: float, k: int = 4) -> dict:
    return {
        "eval_version": version,
        "eval_k": k,
        "eval_pass_at_1": pass_at_1,
        "eval_pass_at_k": min(1.0, 2 * pass_at_1),
    }


def test_held_out_evaluations_show_per_version_with_the_sft_version_named():
    dashboard = dashboard_with_rounds(2)
    dashboard.sft_started()
    dashboard.sft_done(1, 48)
    for version, held_out, unseen in ((0, 0.0, 0.0), (1, 0.5, 0.25), (3, 0.75, None)):
        dashboard.add_eval("held-out", eval_metrics(version, held_out))
        if unseen is not None:
            dashboard.add_eval("unseen kind", eval_metrics(version, unseen))
    console = Console(width=200, record=True)
    console.print(dashboard.view())
    rows = [line for line in console.export_text().splitlines() if line.startswith("│")]
    evals = [[cell.strip() for cell in row.split("│")[1:-1]] for row in rows[-3:]]
    assert evals == [
        ["base", "0.000 (pass@4 0.000)", "0.000 (pass@4 0.000)"],
        ["v1 (sft)", "0.500 (pass@4 1.000)", "0.250 (pass@4 0.500)"],
        ["v3", "0.750 (pass@4 1.000)", ""],
    ]


def test_the_reward_curve_shows_the_reward_of_each_policy_version_a_round_ran(tmp_path):
    bare = assert_plot_image(save_reward_curve(dashboard_with_rounds(1), tmp_path / "bare.png"), min_colors=20)
    dashboard = dashboard_with_rounds(1)
    dashboard.versions = [
        VersionReward(1, 128, 0.8, 0.4),
        VersionReward(2, 24, 0.92, 0.27),
        VersionReward(3, 16, 1.0, 0),
    ]
    drawn = assert_plot_image(save_reward_curve(dashboard, tmp_path / "versions.png"), min_colors=20)
    blue = np.array(matplotlib.colors.to_rgb("C0"))  # the version line's colour (the rounds' too)
    assert (np.abs(drawn - blue).max(axis=2) < 0.05).sum() > (np.abs(bare - blue).max(axis=2) < 0.05).sum() + 50


def test_without_evaluations_the_view_is_the_rounds_table_alone():
    dashboard = dashboard_with_rounds(1)
    assert dashboard.view() is not None and not dashboard.evals
    console = Console(width=200, record=True)
    console.print(dashboard.view())
    assert "held-out pass@1" not in console.export_text()


def test_the_reward_curve_gains_a_held_out_panel_in_its_own_colours(tmp_path):
    plain = dashboard_with_rounds(3)
    evaluated = dashboard_with_rounds(3)
    for version, held_out in ((0, 0.0), (2, 0.5)):
        evaluated.add_eval("held-out", eval_metrics(version, held_out))
    without = assert_plot_image(save_reward_curve(plain, tmp_path / "plain.png"), min_colors=20)
    with_panel = assert_plot_image(save_reward_curve(evaluated, tmp_path / "evals.png"), min_colors=20)
    assert with_panel.shape[1] == without.shape[1] * 4 // 3  # a fourth panel as wide as the others
    green = np.array(matplotlib.colors.to_rgb("C2"))  # the held-out line's colour
    assert (np.abs(with_panel - green).max(axis=2) < 0.05).sum() > 50
    assert (np.abs(without - green).max(axis=2) < 0.05).sum() == 0
