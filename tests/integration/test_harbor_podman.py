"""Rollouts in Harbor's environments (``--sandbox harbor:podman``): real Harbor, real podman and
podman-compose, the real pi binary, a real gateway.

The agent's container sits on a podman network with no route out but to a relay in front of the
gateway (tests/remote_network.py): it reaches the gateway only at the address the gateway was started
with as its public URL, with its rollout token, as a sandbox at a cloud provider would. A scripted
engine stands in for the model (tests/agent_scripts.py). The verifier grades in a fresh environment
of the task's image holding only the agent's work copied through this host.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contracts.gateway_client import GatewayClient
from harnesses.agents import create
from harnesses.registry import create_harness
from harnesses.shell_family import shell_tasks
from harnesses.task import load_harbor
from harnessrl.cli.app import app
from harnessrl.server import BackgroundGateway
from sandboxes import SandboxError, SandboxSpec, create_sandbox
from sandboxes.harbor import HarborSandbox
from sandboxes.harbor_process import harbor_python, preflight
from sandboxes.kinds import checked_options, sandbox_kind
from tests.agent_scripts import bash_then_done, write_then_done
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings, run_single_rollout
from tests.fake_engine import FakeEngine
from tests.integration.verifier_attacks import graded, wrong_answer_task
from tests.remote_network import RemoteNetwork, remote_network

ROOT = Path(__file__).resolve().parents[2]
KIND = "harbor:podman"
IMAGE = "debian:bookworm-slim"
HARBOR_TASK = load_harbor(Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public" / "csv-total")
SHELL = [t for t in shell_tasks() if t.name.startswith(("shell-count-", "shell-rename-"))][:2]
# What an agent that is root in its container plants for the verifier (wrong answer beside it).
PLANTED = {
    "usercustomize.py": (
        'd=$(python3 -c "import site; print(site.getusersitepackages())") && mkdir -p "$d" && '
        "printf 'import os\\nos._exit(0)\\n' > \"$d/usercustomize.py\""
    ),
    ".pth": (
        'd=$(python3 -c "import site; print(site.getsitepackages()[0])") && mkdir -p "$d" && '
        "printf 'import os; os._exit(0)\\n' > \"$d/own.pth\""
    ),
    "PATH shim": "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3",
}


@pytest.fixture(scope="module")
def network() -> Iterator[RemoteNetwork]:
    with remote_network() as made:
        yield made


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.requests = []
    return fake


@pytest.fixture
def public_gateway(sqlite_db, engine_server, engine, network) -> Iterator[BackgroundGateway]:
    """The gateway, naming itself by the relay's address: the one route the sandboxes have."""
    settings = gateway_settings(sqlite_db, engine_server.url, public_url=network.public_url)
    with BackgroundGateway(settings) as gateway:
        network.gateway_port[:] = [int(gateway.url.rsplit(":", 1)[1])]
        yield gateway


def containers() -> set[str]:
    listed = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, check=True
    )
    return set(listed.stdout.split())


def exact(call: dict) -> bool:
    """The call was recorded in token ids, with the engine's log-prob of each output token."""
    return bool(call["prompt_ids"] and call["output_ids"]) and len(call["output_logprobs"]) == len(call["output_ids"])


def rollout_calls(gateway: BackgroundGateway, rollout_id: int) -> list[dict]:
    import httpx

    with httpx.Client(base_url=gateway.url, timeout=30, headers=ADMIN_HEADERS) as http:
        listed = http.get(f"/api/rollouts/{rollout_id}/calls").json()["data"]
        return [http.get(f"/api/calls/{c['id']}").json() for c in listed]


async def test_a_harbor_environment_keeps_the_sandbox_contract(tmp_path):
    spec = SandboxSpec(image=IMAGE, files={"a/b.txt": b"hello\n"}, env={"FOO": "bar"})
    async with await create_sandbox(KIND, spec) as sandbox:
        done = await sandbox.exec("cat a/b.txt; echo $FOO; echo oops >&2; exit 3")
        assert (done.exit_code, done.stdout, done.stderr) == (3, b"hello\nbar\n", b"oops\n")
        slow = await sandbox.exec("sleep 60", timeout_s=2)
        assert (slow.exit_code, slow.killed_reason) == (137, "timeout")
        await sandbox.put_file("/tmp/x/y.bin", bytes(range(256)))
        assert await sandbox.get_file("/tmp/x/y.bin") == bytes(range(256))
        with pytest.raises(FileNotFoundError):
            await sandbox.get_file("missing.txt")
        probe = await sandbox.exec_verifier("env")
        variables = dict(line.split("=", 1) for line in probe.stdout.decode().splitlines())
        assert variables["FOO"] == "bar" and "HARNESSRL_GATEWAY_URL" not in variables
        await sandbox.exec("echo work > new.txt && ln -s new.txt link && mkdir -p /elsewhere && echo x > /elsewhere/f")
        async with await create_sandbox(KIND, SandboxSpec(image=IMAGE)) as fresh:
            await sandbox.copy_workspace_to(fresh)
            copied = await fresh.exec("readlink link; cat link a/b.txt; test -e /elsewhere/f || echo gone")
    assert copied.stdout == b"new.txt\nwork\nhello\ngone\n"


@pytest.mark.parametrize("attack", list(PLANTED))
async def test_code_planted_for_the_verifier_stays_in_the_agents_environment(attack):
    task = wrong_answer_task("python3 /tests/check.py", "fresh_sandbox")
    async with await create_sandbox(KIND, SandboxSpec(image=IMAGE, files=task.files)) as agent:
        planted = await agent.exec(f"echo 41 > answer.txt && {PLANTED[attack]}", timeout_s=60)
        assert planted.ok, planted.text()
        verdict = await graded(KIND, agent, task)
    assert (verdict.reward, verdict.exit_code) == (0.0, 1), verdict.output


async def test_the_right_answer_earns_one_in_the_fresh_environment():
    task = wrong_answer_task("python3 /tests/check.py", "fresh_sandbox")
    async with await create_sandbox(KIND, SandboxSpec(image=IMAGE, files=task.files)) as agent:
        assert (await agent.exec("echo 42 > answer.txt")).ok
        verdict = await graded(KIND, agent, task)
    assert verdict.reward == 1.0, verdict.output


async def test_a_closed_harbor_sandbox_leaves_no_trial_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the worker (a new process) makes its trial folder
    async with await create_sandbox(KIND, SandboxSpec(image=IMAGE)):
        assert list(tmp_path.glob("harnessrl-harbor-*")), "the worker made no trial folder under $TMPDIR"
    assert list(tmp_path.glob("harnessrl-harbor-*")) == []


@pytest.mark.parametrize("agent", ["pi", "qwen-code"])  # qwen-code: one of Harbor's installed agents, as a harness
async def test_an_agent_solves_a_harbor_task_from_its_dockerfile_reaching_the_gateway_only_at_its_public_url(
    agent, public_gateway, engine, network
):
    engine.script = write_then_done("/app/total.txt", "42\n", side_reply="Sum of sales")
    before = containers()
    result = await run_single_rollout(
        create(agent, KIND), public_gateway.url, f"harbor-{agent}", HARBOR_TASK, KIND, network.options()
    )
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    assert containers() == before  # the agent's environment and the verifier's, stopped and removed
    calls = rollout_calls(public_gateway, result.rollout_id)
    assert len(calls) >= 2 and all(exact(c) for c in calls)


async def test_pi_solves_builtin_shell_tasks_in_podman_through_the_gateway(public_gateway, engine, network):
    engine.script = bash_then_done({t.instruction: t.solution for t in SHELL})
    for task in SHELL:
        result = await run_single_rollout(
            create("pi", KIND), public_gateway.url, f"shell-{task.name}", task, KIND, network.options()
        )
        assert (result.status, result.reward, result.error) == ("finished", 1.0, None), task.name
        assert all(exact(c) for c in rollout_calls(public_gateway, result.rollout_id))


async def test_a_gateway_naming_itself_by_loopback_fails_the_rollout_with_the_fix(sqlite_db, engine_server, engine):
    engine.script = write_then_done("/app/total.txt", "42\n", side_reply="t")
    with BackgroundGateway(gateway_settings(sqlite_db, engine_server.url)) as gateway:
        result = await run_single_rollout(create("pi", KIND), gateway.url, "loopback", SHELL[0], KIND, {})
    assert result.status == "failed" and "--public-url" in result.error


async def test_preflight_names_the_extra_the_credentials_or_the_types():
    with pytest.raises(SandboxError, match=r"bin/pip install 'harbor\[islo\]'"):
        await preflight("islo", {})  # an extra that `make harbor` leaves out
    with pytest.raises(SandboxError, match="requires E2B_API_KEY to be set"):
        await preflight("e2b", {})
    with pytest.raises(SandboxError, match="region: Field required"):
        await preflight("ec2", {})
    with pytest.raises(SandboxError, match="no environment type 'vm'.*podman"):
        await preflight("vm", {})
    with pytest.raises(SandboxError, match="Unknown option 'bogus'"):
        await preflight("podman", {"bogus": 1})
    await preflight("podman", {"extra_docker_compose": ["net.yaml"], "keep_containers": False})
    given = {"image_registry": "registry.example.com/team", "keep_containers": False}  # ours is not Harbor's
    assert await checked_options(sandbox_kind(KIND), False, given) == given


async def test_the_oracle_earns_one_on_the_harbor_task_in_podman(public_gateway, engine, network):
    oracle = create_harness("oracle", KIND)
    result = await run_single_rollout(oracle, public_gateway.url, "oracle", HARBOR_TASK, KIND, network.options())
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)


def test_run_refuses_a_type_without_its_credentials_before_any_rollout(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    result = CliRunner().invoke(
        app,
        ["run", "--tasks", "builtin:arithmetic", "--run", "nokey", "--sandbox", "harbor:e2b",
         "--gateway", "http://127.0.0.1:9", "--admin-key", "k"],
    )  # fmt: skip
    assert result.exit_code != 0 and "E2B_API_KEY" in result.output


def test_run_refuses_an_unknown_harbor_type_before_any_rollout(tmp_path):
    result = CliRunner().invoke(
        app,
        ["run", "--tasks", "builtin:arithmetic", "--run", "nope", "--sandbox", "harbor:vm",
         "--gateway", "http://127.0.0.1:9", "--admin-key", "k"],
    )  # fmt: skip
    assert result.exit_code != 0 and "no environment type 'vm'" in result.output


def test_run_on_a_host_whose_podman_cannot_start_fails_before_any_rollout_naming_the_fix(tmp_path, monkeypatch):
    refused = tmp_path / "containers.conf"  # what a fresh host of issue 59's kind had: crun at the hard nproc
    refused.write_text(
        f'[engine]\nruntime = "crun"\n[containers]\ndefault_ulimits = ["nproc={2**31 - 1}:{2**31 - 1}"]\n'
    )
    monkeypatch.setenv("CONTAINERS_CONF", str(refused))  # podman reads this file alone
    result = CliRunner().invoke(
        app,
        ["run", "--tasks", "builtin:arithmetic", "--run", "no-podman", "--sandbox", KIND,
         "--gateway", "http://127.0.0.1:9", "--admin-key", "k"],
    )  # fmt: skip
    assert result.exit_code != 0, result.output
    assert "podman cannot start a container on this host" in result.output
    assert "sudo tests/setup_machine.sh" in result.output and "rollouts this time" not in result.output


FLOOD = """
import json, sys, threading, urllib.error, urllib.request
url, count = sys.argv[1], int(sys.argv[2])
body = json.dumps({"model": "policy", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
statuses, lock = [], threading.Lock()
def call():
    request = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    try:
        response = urllib.request.urlopen(request, timeout=600)
    except urllib.error.HTTPError as error:
        response = error
    with lock:
        statuses.append(response.status)
        if len(statuses) == count:
            open("/tmp/flood.json", "w").write(json.dumps(sorted(statuses)))
    response.read()
threads = [threading.Thread(target=call) for _ in range(count)]
[t.start() for t in threads]
[t.join() for t in threads]
open("/tmp/flood.done", "w").write("done")
"""
SIBLING = """
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url = sys.argv[1]
body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "hi"}]}).encode()
def call(_):
    request = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=120).status
print(json.dumps(list(ThreadPoolExecutor(4).map(call, range(4)))))
"""


async def until_file(sandbox, path: str) -> bytes:
    """The file's content once it exists (the condition the test waits for, not a clock)."""
    while (found := await sandbox.exec(["cat", path])).exit_code != 0:
        await asyncio.sleep(0.2)
    return found.stdout


async def test_a_flooding_rollout_token_gets_429s_at_the_public_url_while_a_siblings_calls_succeed(
    sqlite_db, engine_server, engine, network
):
    """No bridge between the sandbox and the gateway: the gateway holds each token to its cap itself."""
    settings = gateway_settings(sqlite_db, engine_server.url, public_url=network.public_url, token_max_in_flight=4)
    engine.script = None
    try:
        with BackgroundGateway(settings) as gateway:  # (its start-up streams a probe: the gate comes after)
            engine.stream_gate = threading.Event()
            network.gateway_port[:] = [int(gateway.url.rsplit(":", 1)[1])]
            client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
            try:
                flooder, sibling = [await client.create_rollout("flood", t, t, 1, {}) for t in ("a", "b")]
            finally:
                await client.close()
            spec = SandboxSpec(image=IMAGE, files={"flood.py": FLOOD.encode(), "sibling.py": SIBLING.encode()})
            async with await create_sandbox(KIND, spec, **network.options()) as sandbox:
                await sandbox.exec(["sh", "-c", f"setsid python3 flood.py {flooder['base_url']} 6 &"])
                statuses = json.loads(await until_file(sandbox, "/tmp/flood.json"))
                siblings = await sandbox.exec(["python3", "sibling.py", sibling["base_url"]], timeout_s=300)
                engine.stream_gate.set()
                await until_file(sandbox, "/tmp/flood.done")
    finally:
        if engine.stream_gate is not None:
            engine.stream_gate.set()  # streams still held end, whatever failed
        engine.stream_gate = None
    assert statuses == [200, 200, 200, 200, 429, 429]
    assert json.loads(siblings.stdout) == [200, 200, 200, 200], siblings.text()


async def test_an_environment_that_fails_to_start_fails_its_rollout_with_the_providers_error(
    public_gateway, engine, tmp_path
):
    engine.script = write_then_done("/app/total.txt", "42\n", side_reply="t")
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        '{"services": {"main": {"networks": ["no-such-net"]}}, "networks": {"no-such-net": {"external": true}}}'
    )
    result = await run_single_rollout(
        create("pi", KIND), public_gateway.url, "broken", SHELL[0], KIND, {"extra_docker_compose": [str(broken)]}
    )
    assert (result.status, result.reward) == ("failed", None)
    assert "no-such-net" in result.error, result.error


KILLED_RUNNER = """
import asyncio, sys
from sandboxes import SandboxSpec, create_sandbox
async def main():
    sandbox = await create_sandbox("harbor:podman", SandboxSpec(image="debian:bookworm-slim"))
    print(sandbox.id, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def test_a_killed_runner_leaves_no_environment_running(tmp_path):
    """SIGKILL: no handler runs in the runner; its worker sees its stdin close and deletes the environment."""
    script = tmp_path / "runner.py"
    script.write_text(KILLED_RUNNER)
    runner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        sandbox_id = runner.stdout.readline().strip()
        assert sandbox_id and any(sandbox_id in name for name in containers())
    finally:
        runner.kill()
        runner.wait()
    while any(sandbox_id in name for name in containers()):  # until the worker has stopped it
        time.sleep(0.2)


def harbor_would_run(requests: list[dict]) -> list[list[str]]:
    """Harbor's command lines for these worker requests, nothing run (tests/integration/harbor_dry_run.py)."""
    done = subprocess.run(
        [str(harbor_python()), "-I", str(ROOT / "tests" / "integration" / "harbor_dry_run.py")],
        input=json.dumps(requests), capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_harbor_docker_would_run_our_image_under_compose_v2_with_our_exec_and_stop(tmp_path):
    """Harbor's docker type needs Docker Compose V2, which these machines cannot install: what it would run."""
    sandbox = HarborSandbox(SandboxSpec(image="harnessrl/pi:latest", env={"A": "b"}), "docker", {})
    exec_request = sandbox.exec_request(["pi", "--print", "hi"], 30.0, None, None)
    lines = harbor_would_run([
        {"op": "start", **sandbox.start_request("harnessrl/pi:latest")},
        {"op": "exec", **exec_request},
        {"op": "stop"},
    ])  # fmt: skip
    compose = [line for line in lines if line[:2] == ["docker", "compose"]]
    assert compose and all(line[2:4] == ["--project-name", sandbox.id] for line in compose)
    files = [line[i + 1] for line in compose[:1] for i, word in enumerate(line) if word == "-f"]
    assert any(f.endswith("docker-compose-prebuilt.yaml") for f in files)
    assert any(f.endswith("fast-stop.yaml") for f in files)  # our stop grace, merged last but Harbor's own
    assert ["up", "--detach", "--wait"] == [w for w in compose[1] if w in ("up", "--detach", "--wait")]
    [ran] = [line for line in compose if "exec" in line and exec_request["command"] in line]
    assert ran[ran.index("exec") + 1 :][:2] == ["-w", "/workspace"] and "A=b" in ran
    assert any("down" in line for line in compose[2:])  # stopped, and deleted
    asyncio.run(sandbox.close())


async def test_a_sandbox_cancelled_while_its_environment_starts_leaves_no_container():
    """Ctrl-C during a start: the worker cancels Harbor's start, then stops and deletes what it made."""
    for attempt in range(5):  # until the cancel lands between the container's creation and the start's end
        name = f"cancelled{attempt}"
        starting = asyncio.ensure_future(create_sandbox(KIND, SandboxSpec(image=IMAGE, name=name)))
        while not starting.done() and not any(c.startswith(f"{name}-") for c in containers()):
            await asyncio.sleep(0.02)
        if starting.done():  # it started first: close it and try again
            await (await starting).close()
            continue
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        while any(c.startswith(f"{name}-") for c in containers()):
            await asyncio.sleep(0.2)
        return
    pytest.fail("every start ended before its container was seen: the cancel never landed mid-start")
