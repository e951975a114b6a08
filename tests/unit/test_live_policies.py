"""Live keys bound to policies: each user's sessions are served and train their own policy only, and a
promotion of one policy leaves the versions the others serve unchanged."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.live.privacy import scan_sessions
from learner.publish import Publisher
from store.listings import GroupFilter
from tests.learner_runs import tiny_learner_config, train_run
from tests.unit.test_live_privacy import session


async def served(gateway, key: str) -> tuple[str, str]:
    """(policy, engine model) of a new session's call."""
    rollout_id = await session(gateway, key, "hi")
    [call] = (await gateway.http.get(f"/api/rollouts/{rollout_id}/calls", params={"tokens": False})).json()["data"]
    return call["policy"], call["engine_model"]


async def scored_sessions(gateway, key: str, scores: list[float]) -> None:
    ids = [await session(gateway, key, f"task {i}") for i in range(len(scores) + 1)]  # the last stays open
    for rollout_id, score in zip(ids, scores):
        assert await gateway.state.store.live_keys.feedback(rollout_id, score, None)


async def test_each_users_feedback_trains_and_promotes_only_their_own_policy(
    gateway, sqlite_db, tiny_model_dir, tmp_path
):
    store = gateway.state.store
    ada, _ = await store.live_keys.create("ada", "live-ada", train=True, idle_s=0.0, policy="ada")
    bob, _ = await store.live_keys.create("bob", "live-bob", train=True, idle_s=0.0, policy="bob")
    base = gateway.fake.model
    assert await served(gateway, ada) == ("ada", base) and await served(gateway, bob) == ("bob", base)
    await scored_sessions(gateway, ada, [1.0, 0.0])
    await scored_sessions(gateway, bob, [0.0, 1.0])
    for run in ("live-ada", "live-bob"):
        await scan_sessions(store, run)

    config = tiny_learner_config(
        tiny_model_dir,
        tmp_path / "out",
        groups_per_step=2,
        max_steps=1,
        advantage="session",
        publish_enabled=True,
        is_correction="truncate",  # the fake engine's log-probs are no model's: masking would leave no token
    )
    publisher = Publisher("http://gateway", "", tmp_path / "adapters", client=gateway.http)
    result = await train_run(config, store, "live-ada", timeout_s=600, publisher=publisher)
    assert (result.step, result.version) == (1, 1)
    views = {p["policy"]: p for p in (await gateway.http.get("/admin/policies")).json()}
    assert (views["ada"]["current_version"], views["bob"]["current_version"]) == (1, 0)
    assert set(gateway.fake.adapters) == {"ada-v1"}
    untouched = await store.listings.groups(GroupFilter(run="live-bob", status="ready"), 0, 10)
    assert len(untouched) == 2  # bob's feedback waits for bob's own learner

    # live sessions are served the promoted version of their own policy: ada's promotion is not bob's
    assert await served(gateway, ada) == ("ada", base)  # nothing promoted yet
    args = ["keys", "rollback", "1", "--policy", "ada", "--database-url", sqlite_db]
    rolled = await asyncio.to_thread(CliRunner().invoke, app, args)  # its own event loop, in a thread
    assert rolled.exit_code == 0 and "ada-v1" in rolled.output, rolled.output
    assert await served(gateway, ada) == ("ada", "ada-v1")
    assert await served(gateway, bob) == ("bob", base)
    assert (await store.live_keys.serving("live-bob")).promoted == 0
