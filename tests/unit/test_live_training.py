"""Live sessions train: a session becomes a ready group once it ended, its user opted in, it was scanned
clean and it has a reward; the learner with ``[batch] advantage = "session"`` takes one real step on
such sessions (the tiny model), their advantages from the per-user running baseline; sessions of users
who did not opt in, unscanned or holding a secret, or without a reward, never become ready."""

from __future__ import annotations

import pytest
import torch

from harnessrl.live.privacy import scan_sessions
from learner.config import ConfigError, LearnerConfig
from learner.session_advantages import RunningBaselines, batch_session_advantages
from store.listings import GroupFilter
from tests.learner_runs import tiny_learner_config, train_run
from tests.unit.test_live_privacy import PLANTED, session


async def ready_groups(store) -> list[int]:
    return [g.id for g, _, _ in await store.listings.groups(GroupFilter(run="live", status="ready"), 0, 100)]


async def ended_sessions(gateway, user: str, texts: list[str], train: bool = True) -> list[int]:
    key, _ = await gateway.state.store.live_keys.create(user, train=train, idle_s=0.0)  # one session per call
    ids = [await session(gateway, key, text) for text in [*texts, "one more opens the next session"]]
    return ids[:-1]


async def test_only_ended_opted_in_clean_rewarded_sessions_become_ready_and_one_step_trains_on_them(
    gateway, tiny_model_dir, tmp_path
):
    store = gateway.state.store
    ada = await ended_sessions(gateway, "ada", ["list the files", "count the lines", "make a folder"])
    bob = await ended_sessions(gateway, "bob", ["sort the file", f"key {PLANTED}"])
    eve = await ended_sessions(gateway, "eve", ["rename it"], train=False)
    for rollout_id, score in zip([*ada, *bob, *eve], [1, 0, 1, 0, 1, 1]):
        assert await store.live_keys.feedback(rollout_id, score, None)
    assert await ready_groups(store) == []  # not scanned yet

    await scan_sessions(store, "live")

    ready = await ready_groups(store)
    assert len(ready) == 4  # ada's three and bob's clean one; not bob's secret, not eve's (no opt-in)
    config = tiny_learner_config(tiny_model_dir, tmp_path / "out", groups_per_step=4, max_steps=1, advantage="session")
    result = await train_run(config, store, "live", timeout_s=600)
    assert result.step == 1
    consumed = await store.listings.groups(GroupFilter(run="live", status="consumed"), 0, 100)
    assert sorted(g.id for g, _, _ in consumed) == sorted(ready)
    [(_, metrics)] = await store.training.learner_steps(await store.listings.run_id("live"))
    assert metrics["samples"] == 4 and metrics["reward_mean"] == pytest.approx(0.5)

    report = (await gateway.http.get("/api/live")).json()
    users = {u["user"]: u for u in report["users"]}
    assert {k: users["ada"][k] for k in ("sessions", "running", "rewarded", "trained", "redacted")} == {
        "sessions": 4, "running": 1, "rewarded": 3, "trained": 3, "redacted": 0
    }  # fmt: skip
    assert users["ada"]["reward_mean"] == pytest.approx(2 / 3) and users["ada"]["last_reward_at"]
    assert (users["bob"]["redacted"], users["bob"]["findings"], users["bob"]["trained"]) == (
        1,
        {"AWS Access Key": 1},
        1,
    )
    assert (users["eve"]["trainable"], users["eve"]["trained"], users["eve"]["unscanned"]) == (0, 0, 0)
    assert PLANTED not in str(report) and report["promoted"] == 0


def test_a_batch_of_sessions_is_baselined_leave_one_out_until_a_user_has_history():
    baselines = RunningBaselines(min_count=2)
    first = batch_session_advantages([[1.0], [0.0], [None]], [["ann"], ["bob"], ["ann"]], baselines)
    assert first.advantages == ((1.0,), (-1.0,), (None,))  # leave-one-out across the two scored
    assert (first.groups_kept, first.groups_empty, first.rollouts_unscored) == (2, 1, 1)
    batch_session_advantages([[1.0]], [["ann"]], baselines)  # ann: two sessions, baseline 1.0 then 1.0
    [[own]] = batch_session_advantages([[0.0]], [["ann"]], baselines).advantages
    assert own == pytest.approx(-1.0)  # her own moving average, not the batch's (a batch of one is 0)
    assert torch.isfinite(torch.tensor(own))


def test_the_advantage_setting_names_its_choices():
    with pytest.raises(ConfigError, match="batch.advantage"):
        LearnerConfig().updated(batch={"advantage": "grpo"})
