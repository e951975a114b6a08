"""The promotion gate: live sessions are served the promoted version (the base model until one passes),
a candidate passes when a held-out evaluation shows it no worse than the version it replaces within a
margin, a canary serves it to a fraction of new sessions first, and a rollback needs no gate."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.live.promotion import gate
from store.passk import policy_label
from tests.pinning import publish
from tests.unit.test_live_privacy import session


def evaluation(pass_at_k: dict[int, float]) -> dict:
    """eval.json as `harnessrl eval` writes it: a row per policy version (the fields the gate reads)."""
    rows = [
        {"asked": f"policy-v{v}", "policy": policy_label(v), "version": v, "pass_at_k": p, "pass_at_1": p / 2}
        for v, p in pass_at_k.items()
    ]
    return {"run": "held-out", "k": 4, "tasks": ["a", "b"], "policies": rows}


def test_a_candidate_passes_when_no_worse_than_the_incumbent_within_the_margin():
    assert gate(evaluation({1: 0.5, 2: 0.5}), 1, 2).promote
    assert gate(evaluation({1: 0.5, 2: 0.45}), 1, 2, margin=0.1).promote
    refused = gate(evaluation({1: 0.5, 2: 0.4}), 1, 2)
    assert not refused.promote and "0.400 for policy-v2 vs 0.500 for policy-v1" in refused.why
    assert not gate(evaluation({0: 0.3, 1: 0.2}), 0, 1, metric="pass_at_1").promote
    with pytest.raises(ValueError, match="harnessrl eval --policies base,policy-v3"):
        gate(evaluation({1: 0.5}), 0, 3)


async def cli(*args: str):
    return await asyncio.to_thread(CliRunner().invoke, app, list(args))  # its own event loop, in a thread


async def served(gateway, key: str) -> tuple[int, str]:
    rollout_id = await session(gateway, key, "hi")
    view = (await gateway.http.get(f"/api/rollouts/{rollout_id}")).json()
    calls = (await gateway.http.get(f"/api/rollouts/{rollout_id}/calls", params={"tokens": False})).json()["data"]
    [model] = {c["engine_model"] for c in calls}  # what the engine was asked for: the pinned version
    assert model == f"policy-v{view['pinned_version']}" if view["pinned_version"] else not model.startswith("policy-v")
    return view["pinned_version"], view["meta"]["live"]["served"]


async def test_sessions_are_served_the_promoted_version_a_canary_and_a_rollback(gateway, sqlite_db, tmp_path):
    for version in (1, 2):
        await publish(gateway, version)
    key, _ = await gateway.state.store.live_keys.create("ada", idle_s=0.0)  # one session per call
    db = ["--database-url", sqlite_db]
    assert await served(gateway, key) == (0, "promoted")  # nothing passed the gate yet: the base model

    better = tmp_path / "better.json"
    better.write_text(json.dumps(evaluation({0: 0.1, 1: 0.6})))
    promoted = await cli("keys", "promote", "1", "--eval", str(better), *db)
    assert promoted.exit_code == 0 and "passed the gate" in promoted.output, promoted.output
    assert await served(gateway, key) == (1, "promoted")

    worse = tmp_path / "worse.json"
    worse.write_text(json.dumps(evaluation({1: 0.6, 2: 0.2})))
    refused = await cli("keys", "promote", "2", "--eval", str(worse), *db)
    assert refused.exit_code == 1 and "kept, not promoted" in refused.output
    assert await served(gateway, key) == (1, "promoted")

    even = tmp_path / "even.json"
    even.write_text(json.dumps(evaluation({1: 0.6, 2: 0.6})))
    assert (await cli("keys", "promote", "2", "--eval", str(even), "--canary", "1", *db)).exit_code == 0
    assert await served(gateway, key) == (2, "canary")

    assert (await cli("keys", "rollback", "0", *db)).exit_code == 0
    assert await served(gateway, key) == (0, "promoted")
    unknown = await cli("keys", "rollback", "9", *db)
    assert unknown.exit_code == 1 and "never published" in unknown.output
    history = (await gateway.state.store.live_keys.serving("live")).history
    assert [(h["version"], h["why"].split(":")[0]) for h in history] == [(1, "passed the gate"), (0, "rollback")]
    shown = await cli("keys", "report", *db)
    assert shown.exit_code == 0 and "served base" in shown.output and "v1: passed the gate" in shown.output
