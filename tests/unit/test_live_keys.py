"""Live keys: an agent configured with one key and the gateway's /v1 opens its own sessions (rollouts);
a session ends after an idle gap or when the agent names another; a revoked key is refused at its next
call; the key opens no control plane; feedback joins a session late; `forget` leaves nothing of a user."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.server import BackgroundGateway, BackgroundServer
from store.live_keys import LIVE_PREFIX, live_task
from store.store import TOKEN_PREFIX
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.git_hook import commit_with_the_hook

HI = {"model": "policy", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}


def bearer(key: str, session: str | None = None) -> dict:
    return {"authorization": f"Bearer {key}", **({"x-harnessrl-session": session} if session else {})}


async def call(gateway, key: str, session: str | None = None):
    return await gateway.agent.post("/v1/chat/completions", json=HI, headers=bearer(key, session))


async def session_of(gateway, key: str, session: str | None = None) -> int:
    response = await call(gateway, key, session)
    assert response.status_code == 200, response.text
    return int(response.headers["x-harnessrl-rollout-id"])


async def rollout(gateway, rollout_id: int) -> dict:
    response = await gateway.http.get(f"/api/rollouts/{rollout_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def new_key(gateway, user: str = "ada", **options) -> str:
    key, _ = await gateway.state.store.live_keys.create(user, **options)
    return key


async def test_a_live_keys_calls_open_one_session_rollout_without_a_rollout_created(gateway):
    key = await new_key(gateway)
    first, second = await session_of(gateway, key), await session_of(gateway, key)
    assert first == second
    session = await rollout(gateway, first)
    assert (session["run"], session["task"], session["status"]) == ("live", live_task("ada"), "running")
    assert session["meta"]["live"]["user"] == "ada" and session["meta"]["live"]["train"] is False
    calls = (await gateway.http.get(f"/api/rollouts/{first}/calls")).json()["data"]
    assert len(calls) == 2 and key.startswith(LIVE_PREFIX) and LIVE_PREFIX.startswith(TOKEN_PREFIX)


async def test_an_idle_gap_ends_the_session_and_the_next_call_opens_another(gateway):
    key = await new_key(gateway, idle_s=0.0)  # every call comes after the idle time
    first = await session_of(gateway, key)
    second = await session_of(gateway, key)
    assert second != first
    assert (await rollout(gateway, first))["status"] == "finished"
    assert (await rollout(gateway, second))["status"] == "running"


async def test_a_session_named_by_the_agent_continues_until_it_names_another(gateway):
    key = await new_key(gateway)
    a1, a2 = await session_of(gateway, key, "a"), await session_of(gateway, key, "a")
    unnamed = await session_of(gateway, key)  # no name: the open session goes on
    b = await session_of(gateway, key, "b")
    assert a1 == a2 == unnamed != b
    assert (await rollout(gateway, b))["meta"]["live"]["session"] == "b"
    bobs = await session_of(gateway, await new_key(gateway, "bob"), "b")
    assert bobs != b  # a session name is the key's own: another user's "b" is another session
    refused = await call(gateway, key, "no spaces allowed")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "x-harnessrl-session"


async def test_concurrent_first_calls_share_one_session(gateway):
    key = await new_key(gateway)
    responses = await asyncio.gather(*(call(gateway, key) for _ in range(4)))
    assert {r.status_code for r in responses} == {200}
    assert len({r.headers["x-harnessrl-rollout-id"] for r in responses}) == 1
    live = (await gateway.http.get("/api/rollouts", params={"run": "live", "status": "running"})).json()["data"]
    assert len(live) == 1


async def test_a_revoked_key_is_refused_at_its_next_call_in_the_clients_dialect(gateway):
    key = await new_key(gateway)
    await session_of(gateway, key)
    assert await gateway.state.store.live_keys.revoke("ada")
    refused = await call(gateway, key)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "revoked_api_key"
    anthropic = await gateway.agent.post(
        "/v1/messages", json={**HI, "max_tokens": 8}, headers={"x-api-key": key, "anthropic-version": "2023-06-01"}
    )
    assert anthropic.status_code == 401 and anthropic.json()["type"] == "error"
    unknown = await call(gateway, LIVE_PREFIX + "not-a-key")
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/rollouts", None),
        ("GET", "/api/runs/live", None),
        ("GET", "/api/live", None),
        ("POST", "/api/feedback", {"rollout_id": 1, "score": 1.0}),
        ("POST", "/api/rollouts", {"run": "live", "task": "x"}),
        ("GET", "/admin/policy", None),
    ],
)
async def test_a_live_key_opens_no_control_plane_route(gateway, method, path, body):
    key = await new_key(gateway)
    session = await session_of(gateway, key)
    response = await gateway.agent.request(method, path, json=body, headers=bearer(key))
    assert response.status_code == 401, response.text
    assert "live key" in response.text
    assert (await rollout(gateway, session))["reward"] is None  # its own session was not scored


async def test_feedback_joins_an_ended_session_by_its_rollout_or_one_of_its_calls(gateway):
    key = await new_key(gateway, idle_s=0.0)
    ended = await call(gateway, key)
    ended_id, call_id = int(ended.headers["x-harnessrl-rollout-id"]), int(ended.headers["x-harnessrl-call-id"])
    await session_of(gateway, key)  # the next session: the first has ended
    assert (await rollout(gateway, ended_id))["status"] == "finished"

    scored = await gateway.http.post("/api/feedback", json={"rollout_id": ended_id, "score": 0, "note": "wrong file"})
    assert scored.status_code == 200 and scored.json()["reward"] == 0.0
    rescored = await gateway.http.post("/api/feedback", json={"call_id": call_id, "score": 1})
    assert rescored.json() == {"rollout_id": ended_id, "reward": 1.0, "rewards": {"feedback": 1.0}}
    assert (await rollout(gateway, ended_id))["reward_details"]["feedback"]["note"] == ""


async def test_feedback_is_refused_for_task_rollouts_and_bad_bodies(gateway):
    task_rollout = await gateway.new_rollout()
    refused = await gateway.http.post("/api/feedback", json={"rollout_id": task_rollout["id"], "score": 1})
    assert refused.status_code == 404 and "no live session" in refused.text
    bodies = (
        {"score": 1},
        {"rollout_id": 1, "call_id": 2, "score": 1},
        {"rollout_id": 1, "score": "high"},
        {"user": "", "score": 1},
    )
    for body in bodies:
        bad = await gateway.http.post("/api/feedback", json=body)
        assert bad.status_code == 400, (body, bad.text)
    missing = await gateway.http.post("/api/feedback", json={"call_id": 10**9, "score": 1})
    assert missing.status_code == 404
    nobody = await gateway.http.post("/api/feedback", json={"user": "nobody", "score": 1})
    assert nobody.status_code == 404 and "no live session" in nobody.text


FORGOTTEN = "ada-lovelace"  # no hex digest, token or id can hold it by chance (plain "ada" is hex)


async def test_forget_leaves_nothing_of_the_user_and_keeps_the_others(gateway, sqlite_db):
    ada, bob = await new_key(gateway, FORGOTTEN, idle_s=0.0), await new_key(gateway, "bob")
    for _ in range(3):
        await session_of(gateway, ada)
    bobs = await session_of(gateway, bob)

    gone = await gateway.state.store.live_keys.forget(FORGOTTEN)

    assert (gone.keys, gone.rollouts, gone.calls) == (1, 3, 3)
    dump = database_text(sqlite_db)
    assert FORGOTTEN not in dump and ada not in dump
    assert (await rollout(gateway, bobs))["status"] == "running" and await session_of(gateway, bob) == bobs
    assert (await call(gateway, ada)).status_code == 401


def database_text(database_url: str) -> str:
    """Every value of every table, as text: what a person's name or key could hide in."""
    engine = create_engine(database_url.replace("+aiosqlite", ""))
    with engine.connect() as connection:
        tables = [r[0] for r in connection.execute(text("select name from sqlite_master where type = 'table'"))]
        rows = [str(row) for table in tables for row in connection.execute(text(f'select * from "{table}"'))]
    engine.dispose()
    return "\n".join(rows)


async def test_forget_during_a_users_stream_ends_it_with_a_clear_error_and_the_gateway_stays_healthy(
    gateway, fake_engine
):
    import threading

    ada, bob = await new_key(gateway, FORGOTTEN), await new_key(gateway, "bob")
    fake_engine.stream_gate = threading.Event()  # the stream stops after its first chunk
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    streaming = asyncio.create_task(gateway.agent.post("/v1/chat/completions", json=body, headers=bearer(ada)))
    await asyncio.to_thread(fake_engine.stream_started.wait)

    await gateway.state.store.live_keys.forget(FORGOTTEN)
    fake_engine.stream_gate.set()
    ended = await streaming

    assert '"code":"rollout_deleted"' in ended.text.replace(" ", "") and "internal_error" not in ended.text
    health = await gateway.http.get("/health")
    assert health.status_code == 200, health.text
    fake_engine.stream_gate = None
    assert (await call(gateway, bob)).status_code == 200  # the others' calls are recorded as before


async def test_only_the_keys_digest_is_stored(gateway, sqlite_db):
    key = await new_key(gateway)
    await session_of(gateway, key)
    assert key not in database_text(sqlite_db)


def test_the_keys_commands_feedback_and_the_git_hook_work_through_a_served_gateway(sqlite_db, tmp_path):
    from openai import OpenAI

    runner = CliRunner()
    created = runner.invoke(app, ["keys", "create", "--user", "ada", "--database-url", sqlite_db])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip().splitlines()[-1]
    env = {"HARNESSRL_ADMIN_KEY": ADMIN_HEADERS["x-admin-key"]}
    with BackgroundServer(create_fake_engine_app(FakeEngine())) as fake:
        with BackgroundGateway(gateway_settings(sqlite_db, fake.url)) as gateway:
            client = OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
            session = client.chat.completions.with_raw_response.create(**HI).headers["x-harnessrl-rollout-id"]
            by_id = ["feedback", "0", "--rollout", session, "--gateway", gateway.url]
            scored = runner.invoke(app, by_id, env=env)
            assert scored.exit_code == 0 and "reward 0.0" in scored.output, scored.output
            unnamed = runner.invoke(app, ["feedback", "1", "--gateway", gateway.url], env=env)
            assert unnamed.exit_code == 1 and "exactly one of" in unnamed.output

            commit_with_the_hook(tmp_path / "repo", gateway.url)

            listed = httpx.get(f"{gateway.url}/api/rollouts/{session}", headers=ADMIN_HEADERS, timeout=300)
            assert listed.json()["rewards"] == {"feedback": 1.0}
            assert listed.json()["reward_details"]["feedback"]["note"] == "post-commit: test -f done.txt"
    listed = runner.invoke(app, ["keys", "list", "--database-url", sqlite_db])
    assert "ada" in listed.output and key not in listed.output
    assert runner.invoke(app, ["keys", "revoke", "--user", "ada", "--database-url", sqlite_db]).exit_code == 0
    again = runner.invoke(app, ["keys", "revoke", "--user", "ada", "--database-url", sqlite_db])
    assert again.exit_code == 1 and "no valid live key" in again.output
    forgot = runner.invoke(app, ["keys", "forget", "--user", "ada", "--database-url", sqlite_db])
    assert forgot.exit_code == 0 and "1 session(s)" in forgot.output


async def test_ended_sessions_are_pruned_and_the_open_one_kept(gateway):
    from store.retention import PruneFilter

    key = await new_key(gateway, idle_s=0.0)
    sessions = [await session_of(gateway, key) for _ in range(3)]  # two ended, the last open

    pruned = await gateway.state.store.retention.prune(PruneFilter(run="live"))

    assert (pruned.rollouts, pruned.kept_for_learner) == (2, 0)  # no GRPO group waits for a session
    assert (await gateway.http.get(f"/api/rollouts/{sessions[0]}")).status_code == 404
    assert (await rollout(gateway, sessions[-1]))["status"] == "running"


async def test_a_key_opening_sessions_in_a_loop_gets_429s_and_another_key_is_served(
    sqlite_db, fake_engine, fake_engine_server
):
    from tests.gateway_harness import start_gateway

    settings = gateway_settings(sqlite_db, fake_engine_server.url, live_sessions_per_minute=1.0, live_session_burst=3)
    async for gateway in start_gateway(settings, fake_engine):
        flood, calm = await new_key(gateway, "mallory"), await new_key(gateway, "bob")
        answers = [await call(gateway, flood, session=f"s{n}") for n in range(6)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429, 429, 429]
        refused = answers[-1]
        assert refused.json()["error"]["code"] == "live_sessions_rate" and int(refused.headers["retry-after"]) >= 1
        assert all("x-harnessrl-rollout-id" not in a.headers for a in answers[3:])  # no rollout made
        assert (await call(gateway, flood, session="s2")).status_code == 200  # its open session goes on
        assert (await call(gateway, calm)).status_code == 200


async def test_concurrent_opens_of_new_sessions_spend_the_burst_on_sessions_that_open(
    sqlite_db, fake_engine, fake_engine_server
):
    """60 calls at once, each naming a new session: the burst's 20 open (one each), the other 40 are 429s;
    no token goes to a call that joined, or lost, another call's open."""
    from tests.gateway_harness import start_gateway

    # a rate so slow that no token comes back during the test: the burst is all there is
    settings = gateway_settings(sqlite_db, fake_engine_server.url, live_sessions_per_minute=0.001)
    async for gateway in start_gateway(settings, fake_engine):
        key = await new_key(gateway, "mallory")
        answers = await asyncio.gather(*(call(gateway, key, session=f"s{n}") for n in range(60)))
        opened = [a for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code == 429]
        assert (len(opened), len(refused)) == (20, 40), sorted(a.status_code for a in answers)
        assert len({a.headers["x-harnessrl-rollout-id"] for a in opened}) == 20  # each in a session of its own
        assert {a.json()["error"]["code"] for a in refused} == {"live_sessions_rate"}
