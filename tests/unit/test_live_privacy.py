"""Live sessions scanned for secrets (harnessrl.live.privacy): a session holding a credential, in what
the agent sent or what came back, is redacted (bodies, token ids and log-probs gone; only the kinds of
what was found kept) and never trains; a clean one keeps everything; the user's own patterns count."""

from __future__ import annotations

import asyncio
import re

from harnessrl.live.privacy import findings_in, scan_sessions
from tests.unit.test_live_keys import database_text

PLANTED = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example access key id


def chat(text: str) -> dict:
    return {"model": "policy", "messages": [{"role": "user", "content": text}], "max_tokens": 8}


async def session(gateway, key: str, text: str) -> int:
    response = await gateway.agent.post(
        "/v1/chat/completions", json=chat(text), headers={"authorization": f"Bearer {key}"}
    )
    assert response.status_code == 200, response.text
    return int(response.headers["x-harnessrl-rollout-id"])


async def live_sessions(gateway, texts: list[str]) -> list[int]:
    key, _ = await gateway.state.store.live_keys.create("ada", idle_s=0.0)  # one session per call
    ids = [await session(gateway, key, text) for text in [*texts, "the last call opens one more"]]
    return ids[:-1]  # ended: the last one is still open


async def calls_of(gateway, rollout_id: int) -> list[dict]:
    response = await gateway.http.get(f"/api/rollouts/{rollout_id}/calls")  # token ids included
    return response.json()["data"]


async def test_a_session_with_a_credential_is_redacted_and_a_clean_one_kept(gateway, sqlite_db):
    secret, clean = await live_sessions(gateway, [f"deploy with aws_access_key_id = {PLANTED}", "List the files"])

    scans = await scan_sessions(gateway.state.store, "live")

    assert {s.rollout_id: s.findings for s in scans} == {secret: ("AWS Access Key",), clean: ()}
    assert PLANTED not in database_text(sqlite_db)
    [redacted] = await calls_of(gateway, secret)
    assert redacted["num_prompt_tokens"] > 0 and redacted["prompt_ids"] == redacted["output_ids"] == []
    assert redacted["output_logprobs"] is None
    detail = (await gateway.http.get(f"/api/calls/{redacted['id']}")).json()
    assert "redacted" in detail["request"] and "List" not in str(detail["response"])
    meta = (await gateway.http.get(f"/api/rollouts/{secret}")).json()["meta"]["live"]["privacy"]
    assert meta["findings"] == ["AWS Access Key"] and meta["redacted"] is True
    [clean_call] = await calls_of(gateway, clean)
    assert len(clean_call["prompt_ids"]) == clean_call["num_prompt_tokens"]
    kept = (await gateway.http.get(f"/api/calls/{clean_call['id']}")).json()
    assert kept["request"]["messages"][0]["content"] == "List the files"
    assert await scan_sessions(gateway.state.store, "live") == []  # each session is scanned once


async def test_a_secret_in_the_answer_counts_too_and_the_users_patterns_are_findings(gateway, fake_engine):
    from tests.fake_tokens import FakeReply

    fake_engine.script = [FakeReply(content="-----BEGIN RSA PRIVATE KEY-----\nMIIEow"), FakeReply(content="ok")]
    answered, own = await live_sessions(gateway, ["show me the key file", "ticket ACME-123456 is done"])

    scans = await scan_sessions(gateway.state.store, "live", [re.compile(r"ACME-\d{6}")])

    assert {s.rollout_id: s.findings for s in scans} == {answered: ("Private Key",), own: ("pattern 1",)}


def test_ordinary_agent_text_has_no_findings():
    texts = ["hello world", "def f(x): return x + 1", "ls -la /workspace && cat README.md", "ok, 3 files"]
    assert findings_in(texts) == []
    assert findings_in(['password = "hunter2hunter2"']) == ["Secret Keyword"]


async def test_the_scan_command_reports_what_it_redacted_and_names_a_bad_pattern(gateway, sqlite_db):
    from typer.testing import CliRunner

    from harnessrl.cli.app import app

    await live_sessions(gateway, [f"key {PLANTED}", "nothing here"])
    runner = CliRunner()  # in a thread: the command runs its own event loop
    bad = await asyncio.to_thread(runner.invoke, app, ["keys", "scan", "--pattern", "(", "--database-url", sqlite_db])
    assert bad.exit_code == 1 and "no regular expression" in bad.output
    done = await asyncio.to_thread(runner.invoke, app, ["keys", "scan", "--database-url", sqlite_db])
    assert done.exit_code == 0 and "2 session(s) of 'live': 1 redacted, 1 clean" in done.output, done.output


def database_file_bytes(database_url: str) -> bytes:
    """Every byte of a SQLite store's files: the database, its WAL and its shared-memory index."""
    from pathlib import Path

    from sqlalchemy.engine import make_url

    path = Path(make_url(database_url).database)
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())


def planted_everywhere(secret: str) -> dict:
    """A call with ``secret`` in its message (a long one: its row spills into overflow pages, which a
    deletion frees rather than rewrites), its model name and a tool's name."""
    tool = {"type": "function", "function": {"name": f"t_{secret}", "parameters": {"type": "object", "properties": {}}}}
    return {**chat(f"deploy with {secret} " + "and then some " * 1000), "model": f"m-{secret}", "tools": [tool]}


async def answers_of(gateway, rollout_id: int) -> str:
    """What the REST API answers about a session: its rollout, its calls, each call's detail."""
    texts = [(await gateway.http.get(f"/api/rollouts/{rollout_id}")).text]
    texts.append((await gateway.http.get("/api/calls", params={"rollout_id": rollout_id})).text)
    for call in await calls_of(gateway, rollout_id):
        texts.append((await gateway.http.get(f"/api/calls/{call['id']}")).text)
    return "\n".join(texts)


async def test_a_redacted_credential_leaves_no_byte_in_the_database_files_nor_the_api(gateway, sqlite_db, fake_engine):
    fake_engine.max_model_len = 100_000  # the long message
    key, _ = await gateway.state.store.live_keys.create("ada", idle_s=0.0)
    headers = {"authorization": f"Bearer {key}", "x-harnessrl-session": f"s-{PLANTED}"}
    planted = await gateway.agent.post("/v1/chat/completions", json=planted_everywhere(PLANTED), headers=headers)
    assert planted.status_code == 200, planted.text
    rollout_id = int(planted.headers["x-harnessrl-rollout-id"])
    await session(gateway, key, "the next call ends the planted session")
    assert PLANTED.encode() in database_file_bytes(sqlite_db)  # the files held it: the check can fail

    [scan] = [s for s in await scan_sessions(gateway.state.store, "live") if s.rollout_id == rollout_id]

    assert scan.findings == ("AWS Access Key",)
    assert PLANTED.encode() not in database_file_bytes(sqlite_db)  # the gateway still running, its files open
    assert PLANTED not in await answers_of(gateway, rollout_id)


async def test_a_forgotten_users_text_leaves_no_byte_in_the_database_files(gateway, sqlite_db):
    text = "my-own-words-7f3a9c"
    key, _ = await gateway.state.store.live_keys.create("ada", idle_s=0.0)
    await session(gateway, key, text)
    assert text.encode() in database_file_bytes(sqlite_db)

    await gateway.state.store.live_keys.forget("ada")

    assert text.encode() not in database_file_bytes(sqlite_db)
