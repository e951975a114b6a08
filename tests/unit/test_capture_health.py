"""`harnessrl health`: each capture defect planted in a run is counted in its harness's row."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from harnessrl.cli.app import app
from store.records import FALSE_FORK_TOKENS
from store.rollout_asks import AskedSettings
from store.store import Store
from tests.builders import call_record

PROMPT = list(range(1, FALSE_FORK_TOKENS + 40))


async def plant(store: Store) -> int:
    """pi: an exact extension, a retried call and a title; opencode: a fork with 3 drift tokens, a
    false fork (history re-rendered after 64 shared tokens) and an unrelated new conversation."""
    pi = await store.create_rollout("health", "t", None, {"harness": "pi"})
    [first] = await store.insert_calls([call_record(pi.rollout_id, prompt_ids=PROMPT, output_ids=[7, 8])])
    await store.insert_calls(
        [
            call_record(pi.rollout_id, prompt_ids=[*PROMPT, 7, 8, 9], parent_id=first),
            call_record(pi.rollout_id, prompt_ids=[*PROMPT, 7, 8, 9], parent_id=first, tags=["retried"]),
            call_record(pi.rollout_id, prompt_ids=[5, 5], tags=["title"]),
        ]
    )
    opencode = await store.create_rollout("health", "u", None, {"harness": "opencode"})
    rid = opencode.rollout_id
    [root] = await store.insert_calls([call_record(rid, prompt_ids=PROMPT, output_ids=[7, 8, 9, 10])])
    rewritten = [*PROMPT[:FALSE_FORK_TOKENS], 999, *PROMPT[FALSE_FORK_TOKENS + 1 :]]
    await store.insert_calls(
        [
            call_record(rid, prompt_ids=[*PROMPT, 7, 42], fork_of=root, drift_tokens=3),
            call_record(rid, prompt_ids=rewritten),
            call_record(rid, prompt_ids=[3] * (FALSE_FORK_TOKENS + 5)),
        ]
    )
    return await store.listings.run_id("health")


async def test_each_planted_defect_is_counted_in_its_harnesss_row(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        opencode, pi = await store.health.capture_health(await plant(store))
    finally:
        await store.close()
    assert (pi.harness, pi.calls, pi.later_turns, pi.extending_turns, pi.retried, pi.side_calls) == (
        "pi",
        4,
        1,
        1,
        1,
        1,
    )
    assert pi.extension_rate == 1.0 and (pi.forks, pi.false_forks) == (0, 0)
    assert (opencode.harness, opencode.later_turns, opencode.extending_turns) == ("opencode", 3, 0)
    assert (opencode.forks, opencode.drift_tokens, opencode.false_forks) == (1, 3, 1)
    assert opencode.extension_rate == 0.0 and opencode.side_call_share == 0.0


def test_health_prints_the_table_and_names_an_unknown_run(sqlite_db):
    async def planted() -> None:
        store = Store.from_url(sqlite_db)
        try:
            await plant(store)
        finally:
            await store.close()

    asyncio.run(planted())
    result = CliRunner().invoke(app, ["health", "--run", "health", "--database-url", sqlite_db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "capture health of run 'health'" in result.output and "opencode" in result.output
    missing = CliRunner().invoke(app, ["health", "--run", "nope", "--database-url", sqlite_db])
    assert missing.exit_code == 1 and "no run named 'nope'" in missing.output


async def test_the_run_page_reads_the_same_rows_from_the_api(gateway):
    await plant(gateway.app.state.gateway.store)
    response = await gateway.http.get("/api/runs/health/health")
    assert response.status_code == 200
    opencode, pi = response.json()
    assert (pi["harness"], pi["rollouts"], pi["calls"], pi["extension_rate"], pi["retried"]) == ("pi", 1, 4, 1.0, 1)
    assert (opencode["forks"], opencode["drift_tokens"], opencode["false_forks"]) == (1, 3, 1)
    missing = await gateway.http.get("/api/runs/nope/health")
    assert missing.status_code == 404 and "not found" in missing.json()["error"]["message"]


def test_health_of_a_policy_reads_every_call_it_served_and_only_those(sqlite_db):
    async def planted() -> None:
        store = Store.from_url(sqlite_db)
        try:
            await plant(store)  # run 'health', policy 'policy'
            ada = await store.create_rollout(
                "ada-run", "t", None, {"harness": "hermes"}, settings=AskedSettings(policy="ada")
            )
            await store.insert_calls([call_record(ada.rollout_id, prompt_ids=PROMPT, policy="ada")])
        finally:
            await store.close()

    asyncio.run(planted())

    def health(*args: str):
        return CliRunner().invoke(app, ["health", *args, "--database-url", sqlite_db], env={"COLUMNS": "200"})

    ada = health("--policy", "ada")
    assert ada.exit_code == 0, ada.output
    assert "capture health of policy 'ada'" in ada.output and "hermes" in ada.output and "opencode" not in ada.output
    default = health("--policy", "policy")
    assert "opencode" in default.output and "hermes" not in default.output
    unknown = health("--policy", "bob")
    assert unknown.exit_code == 1 and "ada" in unknown.output  # names the known policies
    assert health("--policy", "../x").exit_code == 1
    neither, both = health(), health("--run", "health", "--policy", "ada")
    assert neither.exit_code == both.exit_code == 1 and "--run NAME or --policy NAME" in neither.output
