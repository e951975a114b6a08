"""The viewer's REST contract: filtered keyset listings, run summaries, decoded calls, conversations, /docs."""

from __future__ import annotations

import asyncio
import statistics
from datetime import datetime

import pytest
from sqlalchemy import delete, select
from typer.testing import CliRunner

from harnessrl.cli.app import app as cli
from store.tables import LearnerStep, Rollout, Run
from tests.builders import call_record
from tests.listing_seeds import get_all, ids, seed

# --- runs ------------------------------------------------------------------------------------


async def test_runs_filter_by_name_substring_and_page_by_cursor(gateway):
    for name in ("exp-a", "exp-b", "other", "exp-c"):
        await gateway.new_rollout(run=name)
    assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=1, name="exp-")] == ["exp-a", "exp-b", "exp-c"]
    assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=3)] == ["exp-a", "exp-b", "other", "exp-c"]
    one = (await gateway.http.get("/api/runs/other")).json()
    assert one["name"] == "other"
    assert one["config"] == {"capture": "engine", "sampling": {"temperature": 1.0, "top_p": 1.0}, "policy": "policy"}


async def test_runs_newest_first_page_by_cursor_down(gateway):
    for name in ("exp-a", "exp-b", "other", "exp-c", "exp-d"):
        await gateway.new_rollout(run=name)
    newest = ["exp-d", "exp-c", "other", "exp-b", "exp-a"]
    for limit in (1, 2, 5, 7):
        assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=limit, order="desc")] == newest
        assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=limit, order="asc")] == newest[::-1]
    first = (await gateway.http.get("/api/runs", params={"order": "desc", "limit": 2})).json()
    assert [r["name"] for r in first["data"]] == ["exp-d", "exp-c"] and first["next_cursor"] == first["data"][1]["id"]
    assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=2, order="desc", name="exp-")] == [
        "exp-d",
        "exp-c",
        "exp-b",
        "exp-a",
    ]
    assert [r["name"] for r in await get_all(gateway, "/api/runs")] == newest[::-1]  # asc stays the default


async def test_runs_carry_their_rollout_counts(gateway):
    seeded = await seed(gateway)
    await gateway.new_rollout(run="beta")  # a second running rollout
    empty = await gateway.new_rollout(run="gamma")
    store = gateway.app.state.gateway.store
    async with store.sessions() as session:  # the store's rows, independently of the listing's query
        rows = (
            await session.execute(
                select(Run.name, Rollout.status, Rollout.reward, Rollout.created_at)
                .join(Run, Run.id == Rollout.run_id)
                .where(Rollout.id != empty["id"])
            )
        ).all()
        await session.execute(delete(Rollout).where(Rollout.id == empty["id"]))
        await session.commit()
    runs = {r["name"]: r for r in await get_all(gateway, "/api/runs", limit=2, order="desc")}
    assert set(runs) == {"alpha", "beta", "gamma"} and len(seeded.rollouts) == 9
    for name in ("alpha", "beta"):
        mine = [row for row in rows if row.name == name]
        rewards = [row.reward for row in mine if row.reward is not None]
        assert runs[name]["rollouts"] == len(mine)
        assert runs[name]["rollouts_finished"] == sum(row.status == "finished" for row in mine)
        assert runs[name]["reward_mean"] == (pytest.approx(statistics.mean(rewards)) if rewards else None)
        assert datetime.fromisoformat(runs[name]["last_activity"]).replace(tzinfo=None) == max(
            row.created_at for row in mine
        ).replace(tzinfo=None)
    assert (runs["alpha"]["rollouts"], runs["alpha"]["rollouts_finished"], runs["beta"]["rollouts"]) == (8, 6, 2)
    counts = ("rollouts", "rollouts_finished", "reward_mean", "last_activity")
    assert [runs["gamma"][key] for key in counts] == [0, 0, None, None]  # a run without rollouts
    one = (await gateway.http.get("/api/runs/alpha")).json()
    assert one == runs["alpha"]


async def test_unknown_things_are_404_in_openai_error_json(gateway):
    for path in (
        "/api/runs/nope",
        "/api/runs/nope/summary",
        "/api/runs/nope/steps",
        "/api/groups/99",
        "/api/rollouts/99",
        "/api/rollouts/99/calls",
        "/api/rollouts/99/conversation",
        "/api/calls/99",
    ):
        response = await gateway.http.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "not_found_error" and response.json()["error"]["message"]


async def test_bad_parameters_are_400_in_openai_error_json(gateway):
    for path, params in (
        ("/api/rollouts", {"reward_min": 1, "reward_max": 0}),
        ("/api/rollouts", {"limit": 0}),
        ("/api/calls", {"limit": 1001}),
        ("/api/rollouts", {"policy_version": "x"}),
        ("/api/groups", {"after": -1}),
        ("/api/rollouts/1/calls", {"tokens": "maybe"}),
        ("/api/runs", {"order": "sideways"}),
    ):
        response = await gateway.http.get(path, params=params)
        assert response.status_code == 400, (path, params)
        assert response.json()["error"]["type"] == "invalid_request_error"


async def test_run_summary_matches_an_independent_count(gateway):
    seeded = await seed(gateway)
    state = gateway.app.state.gateway
    async with state.store.sessions.begin() as session:
        run_id = (await gateway.http.get("/api/runs/alpha")).json()["id"]
        session.add_all([LearnerStep(run_id=run_id, step=s, metrics={"loss": s}) for s in (1, 2, 3)])
    summary = (await gateway.http.get("/api/runs/alpha/summary")).json()

    alpha = seeded.rollouts[:-1]
    calls = [c for r in alpha for c in r["calls"]]
    rewards = [r["reward"] for r in alpha if r["reward"] is not None]
    by_version: dict[int, list] = {}
    for r in alpha:
        by_version.setdefault(min(r["versions"]), []).append(r["reward"])
    expected_versions = [
        {
            "policy_version": v,
            "rollouts": len(rs),
            "reward_mean": statistics.mean([x for x in rs if x is not None])
            if any(x is not None for x in rs)
            else None,
        }
        for v, rs in sorted(by_version.items())
    ]
    assert summary["run"] == "alpha" and summary["rollouts"] == 8
    assert summary["rollouts_by_status"] == {"finished": 6, "running": 2}
    assert summary["groups_by_status"] == {"ready": 3, "open": 1}
    assert summary["reward_mean"] == pytest.approx(statistics.mean(rewards))
    assert [
        {**v, "reward_mean": pytest.approx(v["reward_mean"]) if v["reward_mean"] is not None else None}
        for v in expected_versions
    ] == summary["reward_by_version"]
    assert summary["calls"] == len(calls) == 16
    assert summary["side_calls"] == sum(1 for c in calls if c.tags) == 2
    assert summary["roots"] == 16 and summary["forks"] == 0 and summary["fork_rate"] == 0.0
    assert summary["prompt_tokens"] == sum(len(c.prompt_ids) for c in calls)
    assert summary["output_tokens"] == sum(len(c.output_ids) for c in calls)
    assert summary["drift_tokens"] == 0 and summary["learner_steps"] == 3

    steps = await get_all(gateway, "/api/runs/alpha/steps", limit=2)
    assert [(s["step"], s["metrics"]) for s in steps] == [(1, {"loss": 1}), (2, {"loss": 2}), (3, {"loss": 3})]
    page = (await gateway.http.get("/api/runs/alpha/steps", params={"limit": 2})).json()
    assert page["next_cursor"] == 2


async def test_run_summary_counts_forks_and_drift(gateway):
    rollout = await gateway.new_rollout(run="forky")
    store = gateway.app.state.gateway.store
    [first] = await store.insert_calls([call_record(rollout["id"])])
    await store.insert_calls(
        [call_record(rollout["id"], parent_id=first), call_record(rollout["id"], fork_of=first, drift_tokens=3)]
    )
    summary = (await gateway.http.get("/api/runs/forky/summary")).json()
    assert (summary["calls"], summary["roots"], summary["forks"], summary["drift_tokens"]) == (3, 2, 1, 3)
    assert summary["fork_rate"] == pytest.approx(1 / 3)
    assert (summary["later_turns"], summary["extending_turns"]) == (2, 1) and summary["extension_rate"] == 0.5
    empty = await gateway.new_rollout(run="empty")
    await store.insert_calls([call_record(rollout["id"], tags=["title"])])  # a side call: not a turn
    titled = (await gateway.http.get("/api/runs/forky/summary")).json()
    assert (titled["calls"], titled["later_turns"], titled["extending_turns"]) == (4, 2, 1)
    empty_summary = (await gateway.http.get("/api/runs/empty/summary")).json()
    assert empty and empty_summary["fork_rate"] is None and empty_summary["extension_rate"] is None


# --- groups and rollouts -------------------------------------------------------------------


async def test_groups_filter_by_run_task_status_and_show_their_rewards_side_by_side(gateway):
    seeded = await seed(gateway)
    groups = await get_all(gateway, "/api/groups", limit=3, run="alpha")
    assert len(groups) == 4 and {g["run"] for g in groups} == {"alpha"}
    for group in groups:
        members = [r for r in seeded.rollouts if r.get("group_id") == group["id"]]
        assert group["rollouts"] == [{"id": r["id"], "status": r["status"], "reward": r["reward"]} for r in members]
    assert {g["name"] for g in await get_all(gateway, "/api/groups", run="alpha", task="task-1")} == {"g0", "g1"}
    open_groups = await get_all(gateway, "/api/groups", run="alpha", status="open")
    assert [g["task"] for g in open_groups] == ["task-1"]
    one = (await gateway.http.get(f"/api/groups/{groups[0]['id']}")).json()
    assert one == groups[0]


@pytest.mark.parametrize(
    "params, keep",
    [
        ({"run": "alpha"}, lambda r: r["run"] == "alpha"),
        ({"task": "task-1"}, lambda r: r["task"] == "task-1"),
        ({"status": "running"}, lambda r: r["status"] == "running"),
        ({"harness": "opencode"}, lambda r: r["harness"] == "opencode"),
        ({"run": "alpha", "harness": "pi"}, lambda r: r["run"] == "alpha" and r["harness"] == "pi"),
        ({"policy_version": 2}, lambda r: 2 in r["versions"]),
        ({"policy_version": 3}, lambda r: 3 in r["versions"]),
        ({"reward_min": 0.5}, lambda r: r["reward"] is not None and r["reward"] >= 0.5),
        ({"reward_max": 0.5}, lambda r: r["reward"] is not None and r["reward"] <= 0.5),
        (
            {"reward_min": 0.25, "reward_max": 0.75, "status": "finished"},
            lambda r: r["reward"] is not None and 0.25 <= r["reward"] <= 0.75,
        ),
    ],
)
async def test_rollouts_filter_by_each_field(gateway, params, keep):
    seeded = await seed(gateway)
    expected = [r["id"] for r in seeded.rollouts if keep(r)]
    assert expected  # every case selects something, and not everything
    assert ids(await get_all(gateway, "/api/rollouts", limit=2, **params)) == expected


async def test_rollouts_filter_by_group_and_carry_group_id(gateway):
    seeded = await seed(gateway)
    first = seeded.rollouts[0]
    found = await get_all(gateway, "/api/rollouts", group_id=first["group_id"])
    assert ids(found) == [r["id"] for r in seeded.rollouts if r.get("group_id") == first["group_id"]]
    assert {r["group_id"] for r in found} == {first["group_id"]} and found[0]["group"] == "g0"


# --- calls -------------------------------------------------------------------------------------


async def test_rollout_calls_without_tokens_leave_the_arrays_empty(gateway):
    seeded = await seed(gateway)
    rollout = seeded.rollouts[0]
    full = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    light = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"tokens": "false"})).json()["data"]
    assert full[1]["prompt_ids"] == [1, 2, 3, 1] and full[1]["output_ids"] == [5, 5]
    assert full[1]["num_prompt_tokens"] == 4 and full[1]["num_output_tokens"] == 2
    tokens = ("prompt_ids", "prompt_roles", "output_ids", "output_logprobs")
    for call in light:
        assert call["prompt_ids"] == call["prompt_roles"] == call["output_ids"] == call["output_logprobs"] == []
    assert [{k: v for k, v in c.items() if k not in tokens} for c in full] == [
        {k: v for k, v in c.items() if k not in tokens} for c in light
    ]
    titles = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"tag": "title"})).json()["data"]
    assert [c["tags"] for c in titles] == [["title"]]
    stops = (
        await gateway.http.get(f"/api/rollouts/{seeded.rollouts[5]['id']}/calls", params={"finish_reason": "length"})
    ).json()["data"]
    assert [c["id"] for c in stops] == [seeded.rollouts[5]["call_ids"][1]]


@pytest.mark.parametrize(
    "params, keep",
    [
        ({}, lambda r, k, c: True),
        ({"run": "beta"}, lambda r, k, c: r["run"] == "beta"),
        ({"tag": "title"}, lambda r, k, c: bool(c.tags)),
        ({"tag": "titl"}, lambda r, k, c: False),
        ({"finish_reason": "length"}, lambda r, k, c: c.finish_reason == "length"),
        ({"dialect": "responses"}, lambda r, k, c: c.dialect == "responses"),
        ({"run": "alpha", "tag": "title"}, lambda r, k, c: r["run"] == "alpha" and bool(c.tags)),
    ],
)
async def test_calls_listing_filters_and_pages(gateway, params, keep):
    seeded = await seed(gateway)
    expected = [i for r in seeded.rollouts for k, (i, c) in enumerate(zip(r["call_ids"], r["calls"])) if keep(r, k, c)]
    found = await get_all(gateway, "/api/calls", limit=3, **params)
    assert ids(found) == expected
    assert all(c["prompt_ids"] == [] for c in found)
    by_rollout = await get_all(gateway, "/api/calls", rollout_id=seeded.rollouts[1]["id"])
    assert ids(by_rollout) == seeded.rollouts[1]["call_ids"]


# --- decoding ----------------------------------------------------------------------------------


# --- conversations -----------------------------------------------------------------------------


# --- docs and the CLI --------------------------------------------------------------------------


async def test_docs_is_swagger_ui_from_local_assets(gateway):
    page = await gateway.http.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "cdn" not in page.text.lower()
    for asset in ("/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
        assert f'"{asset}"' in page.text or f"'{asset}'" in page.text
        assert (await gateway.http.get(asset)).status_code == 200
    schema = (await gateway.http.get("/openapi.json")).json()
    assert (
        "/api/runs/{name}/summary" in schema["paths"] and "/api/rollouts/{rollout_id}/conversation" in schema["paths"]
    )


async def test_ls_filters_like_the_rest_listings(gateway, sqlite_db):
    seeded = await seed(gateway)

    def invoke(*args):  # the CLI runs its own event loop: off this test's loop
        return asyncio.to_thread(CliRunner().invoke, cli, [*args, "--database-url", sqlite_db])

    result = await invoke(
        "ls", "rollouts", "--run", "alpha", "--harness", "pi", "--reward-min", "0.5", "--status", "finished"
    )
    shown = {
        int(line.split()[1])
        for line in result.output.splitlines()
        if line.startswith("│") and line.split()[1].isdigit()
    }
    assert result.exit_code == 0
    assert shown == {
        r["id"] for r in seeded.rollouts if r["run"] == "alpha" and r["harness"] == "pi" and (r["reward"] or 0) >= 0.5
    }
    versions = await invoke("ls", "rollouts", "--policy-version", "3")
    assert versions.exit_code == 0
    groups = await invoke("ls", "groups", "--run", "alpha", "--task", "task-1", "--status", "open")
    assert groups.exit_code == 0 and groups.output.count("task-1") == 1

    # Runs, newest first, with the counts of GET /api/runs.
    runs = await asyncio.to_thread(
        CliRunner().invoke, cli, ["ls", "runs", "--database-url", sqlite_db], env={"COLUMNS": "200"}
    )
    rows = [line.strip("│ ").split("│") for line in runs.output.splitlines() if line.startswith("│")]
    cells = {row[1].strip(): [cell.strip() for cell in row[4:7]] for row in rows if row[0].strip().isdigit()}
    assert runs.exit_code == 0 and list(cells) == ["beta", "alpha"]
    api = {r["name"]: r for r in await get_all(gateway, "/api/runs")}
    for name, (rollouts, finished, reward) in cells.items():
        assert (int(rollouts), int(finished)) == (api[name]["rollouts"], api[name]["rollouts_finished"])
        assert reward == ("" if api[name]["reward_mean"] is None else f"{api[name]['reward_mean']:.3f}")
