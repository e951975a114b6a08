"""ECHO end to end (issue 61): conversations with a tool result recorded through the gateway under tito
capture carry their token roles into the store, and the learner's step over that store trains ECHO on
exactly the tool-result tokens of its samples, a group without reward spread kept for ECHO alone. The
same store with its calls' roles unknown (as a store from before migration 0018 reads) trains GRPO alone,
its loss the same as with the roles known and ECHO off."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from store.database import sqlite_url
from store.records import TokenRole
from store.samples import build_samples
from store.store import Store
from tests.learner_reads import stored_steps
from tests.learner_runs import tiny_learner_config, train_run
from tests.role_calls import TOOL_RESULT, converse, script

RUN = "echo-e2e"
# (group, dialect per rollout, reward per rollout): one group with reward spread, one without
GROUPS = (("spread", ("chat", "messages"), (1.0, 0.0)), ("flat", ("responses", "chat"), (0.5, 0.5)))


async def record_groups(gateway) -> dict[str, list[int]]:
    """Each group's rollouts, every one the tool-calling conversation under tito capture, ended with its
    reward: both groups ready for the learner."""
    groups: dict[str, list[int]] = {}
    for group, dialects, rewards in GROUPS:
        for dialect, reward in zip(dialects, rewards):
            script(gateway)
            rollout = await gateway.new_rollout(
                run=RUN, task=group, group=group, group_size=len(rewards), capture="tito"
            )
            await converse(gateway, dialect, rollout["token"])
            ended = await gateway.http.post(
                f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"verifier": reward}}
            )
            assert ended.status_code == 200, ended.text
            groups.setdefault(group, []).append(rollout["id"])
    return groups


def copy_database(source: Path, target: Path, forget_roles: bool = False) -> str:
    """A copy of the store's SQLite file (through SQLite's backup, whatever its journal holds); ``forget_roles``:
    every call's prompt roles NULL, as calls recorded before migration 0018 read."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
        if forget_roles:
            dst.execute("UPDATE calls SET prompt_roles = NULL")
    return sqlite_url(target)


async def one_step(url: str, tiny_model_dir: Path, out: Path, echo_weight: float) -> dict:
    """The learner's first step over the whole store (both groups), with ``echo_weight``: its stored metrics."""
    store = Store.from_url(url)
    try:
        # the fake engine's log-probs are not the tiny model's (~7 nats apart): truncated IS trains every sampled
        # token whatever its ratio, and the mismatch is no news
        config = tiny_learner_config(
            tiny_model_dir, out, max_steps=1, echo_weight=echo_weight, is_correction="truncate", mismatch_alarm=100.0
        )
        result = await train_run(config, store, RUN, timeout_s=120)
        assert result.step == 1 and result.reason == "max_steps"
        [metrics] = await stored_steps(store, RUN)
        return metrics
    finally:
        await store.close()


async def tool_tokens(url: str, rollouts: list[int], model_text) -> int:
    """The TOOL-role tokens of the rollouts' samples as the store builds them (no sample's first token, which
    nothing in it predicts), each sample's decoding to the tool result checked on the way."""
    store = Store.from_url(url)
    try:
        count = 0
        for rollout_id in rollouts:
            samples = build_samples(await store.calls.nodes(rollout_id))
            assert samples, f"rollout {rollout_id} made no sample"
            for sample in samples:
                assert sample.roles is not None and len(sample.roles) == len(sample.input_ids)
                tool = sample.roles == TokenRole.TOOL
                assert not tool[0]
                assert model_text.decode(sample.input_ids[tool].tolist()) == TOOL_RESULT
                count += int(tool.sum())
        return count
    finally:
        await store.close()


async def test_tool_results_recorded_through_the_gateway_are_what_the_learners_echo_term_trains(
    tito_gateway, tiny_model_dir, model_text, tmp_path
):
    groups = await record_groups(tito_gateway)
    database = tmp_path / "harnessrl.db"  # the gateway's store (tests/conftest.py's sqlite_db)
    with_roles = copy_database(database, tmp_path / "roles.db")
    plain = copy_database(database, tmp_path / "plain.db")
    without_roles = copy_database(database, tmp_path / "no-roles.db", forget_roles=True)

    wanted = await tool_tokens(with_roles, [r for rollouts in groups.values() for r in rollouts], model_text)
    assert wanted > 0

    echo = await one_step(with_roles, tiny_model_dir, tmp_path / "echo", echo_weight=0.5)
    # the flat group's two samples kept for ECHO alone, none dropped as unscored
    assert echo["samples"] == 4 and echo["samples_echo_only"] == 2 and echo["samples_unscored"] == 0
    assert echo["echo_tokens"] == wanted
    assert math.isfinite(echo["echo_loss"]) and echo["echo_loss"] > 0

    grpo = await one_step(plain, tiny_model_dir, tmp_path / "grpo", echo_weight=0.0)
    assert grpo["samples"] == 2 and grpo["samples_echo_only"] == 0 and grpo["samples_unscored"] == 2
    assert grpo["echo_tokens"] == 0 and grpo["echo_loss"] is None
    # ECHO adds its own term: GRPO's over the spread group is the same with it or without
    assert echo["tokens_trained"] == grpo["tokens_trained"] > 0
    assert math.isclose(echo["loss"], grpo["loss"], rel_tol=1e-5, abs_tol=1e-7)

    unknown = await one_step(without_roles, tiny_model_dir, tmp_path / "unknown", echo_weight=0.5)
    assert unknown.get("echo_tokens", 0) == 0 and unknown.get("echo_loss") is None
    assert unknown["samples"] == 2 and unknown["samples_echo_only"] == 0 and unknown["samples_unscored"] == 2
    assert unknown["loss"] == grpo["loss"] and unknown["tokens_trained"] == grpo["tokens_trained"]
