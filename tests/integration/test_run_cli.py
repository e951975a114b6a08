"""`harnessrl run` as users run it: G=4, concurrency 8, 10 tasks; killed midway, rerun, resumed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnesses.task import builtin_tasks_path, load_tasks
from harnessrl.server import BackgroundGateway, BackgroundServer
from harnessrl.settings import admin_key
from sandboxes.docker import LABEL
from store.leases import TAKEN_OVER
from tests import http_calls as http
from tests.builders import gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.unit.test_runner import solving_script
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap (apt-get install bubblewrap)")
TASKS = [t for t in load_tasks(builtin_tasks_path()) if t.dockerfile is None][:10]
LEASE_S = "10"  # renewed every third of it: a busy machine stalls a runner for seconds, a shorter one expires


@pytest.fixture
def gateway(sqlite_db, tmp_path, monkeypatch) -> Iterator[BackgroundGateway]:
    """A gateway whose key is the one `serve` would write: `harnessrl run` must find it by itself."""
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESSRL_ADMIN_KEY", raising=False)
    engine = FakeEngine(script=solving_script(TASKS), record_requests=False)
    with BackgroundServer(create_fake_engine_app(engine)) as fake:
        settings = gateway_settings(sqlite_db, fake.url, admin_key=admin_key(create=True))
        with BackgroundGateway(settings) as gateway:
            yield gateway


def run_command(gateway: BackgroundGateway, tasks_file) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harnessrl.cli",
        "run",
        "--tasks",
        str(tasks_file),
        "--harness",
        "builtin",
        "--group-size",
        "4",
        "--concurrency",
        "8",
        "--sandbox",
        "local",
        "--run",
        "cli-run",
        "--gateway",
        gateway.url,
        "--lease-s",
        LEASE_S,
    ]


def rollouts(gateway) -> list[dict]:
    return http.get(
        f"{gateway.url}/api/rollouts",
        params={"run": "cli-run", "limit": 1000},
        headers={"x-admin-key": admin_key()},
        timeout=60,
    ).json()["data"]


def test_run_finishes_and_resumes_after_an_interrupt(gateway, tmp_path):
    tasks_file = tmp_path / "tasks.jsonl"
    subset = [
        line
        for line in (builtin_tasks_path() / "builtin.jsonl").read_text().splitlines()
        if any(f'"name": "{t.name}"' in line for t in TASKS)
    ]
    tasks_file.write_text("\n".join(subset) + "\n")
    first = subprocess.Popen(
        run_command(gateway, tasks_file), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_until(
        lambda: sum(r["status"] == "finished" for r in rollouts(gateway)) >= 8 or first.poll() is not None,
        "8 rollouts finished",
        timeout_s=600,
        interval_s=0.2,
    )
    assert first.poll() is None, first.communicate()[0].decode()[-3000:]  # still mid-run, not ended early
    os.killpg(first.pid, signal.SIGKILL)  # interrupted mid-run, rollouts in flight
    first.wait()
    interrupted = sum(r["status"] == "running" for r in rollouts(gateway))

    second = subprocess.run(run_command(gateway, tasks_file), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    final = rollouts(gateway)
    done = Counter((r["task"], r["meta"]["index"]) for r in final if r["status"] == "finished")
    assert sorted(done.values()) == [1] * 40  # every (task, index) finished exactly once
    assert all(r["reward"] == 1.0 for r in final if r["status"] == "finished")
    # Rollouts the killed runner left running were cancelled once their leases expired (freeing their
    # places in their groups) and replaced (requests it had in flight may still land after the kill, so
    # there can be more than were counted right then).
    cancelled = [r for r in final if r["status"] == "cancelled"]
    assert len(cancelled) >= interrupted and all(r["error"] == TAKEN_OVER for r in cancelled)
    assert not [r for r in final if r["status"] == "failed"]
    groups = http.get(
        f"{gateway.url}/api/groups", params={"run": "cli-run", "status": "ready"}, headers={"x-admin-key": admin_key()}
    ).json()["data"]
    assert len(groups) == 10


SLOW_TASK = "sigterm-slow"  # its own name: the containers of other tests' sandboxes are not this run's


def slow_task_file(tmp_path) -> str:
    path = tmp_path / "slow.jsonl"
    task = {"name": SLOW_TASK, "instruction": "Wait.", "verifier": "true", "solution": "sleep 600"}
    path.write_text(json.dumps(task))
    return str(path)


def sandbox_containers() -> list[str]:
    """This test's sandbox containers, running or not (a container is named for its sandbox's task)."""
    import docker

    client = docker.from_env(timeout=60)
    try:
        found = client.containers.list(
            all=True, filters={"label": LABEL, "name": f"harnessrl-{SLOW_TASK}-"}, ignore_removed=True
        )  # a container removed between the listing and its inspection is gone, not an error
        return [c.name for c in found]
    finally:
        client.close()


@pytest.mark.parametrize("sandbox", ["docker", "local"])
def test_sigterm_stops_a_run_with_no_sandbox_left_and_no_rollout_running(gateway, tmp_path, sandbox):
    before = set(sandbox_containers()) if sandbox == "docker" else set()  # an earlier run's, if it leaked
    command = [
        *[sys.executable, "-m", "harnessrl.cli", "run", "--tasks", slow_task_file(tmp_path), "--harness", "oracle"],
        *["--group-size", "2", "--sandbox", sandbox, "--run", "cli-run", "--gateway", gateway.url],
    ]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(
            lambda: run.poll() is not None or len([r for r in rollouts(gateway) if r["status"] == "running"]) == 2,
            "both rollouts running",
            timeout_s=600,
        )
        if sandbox == "docker":
            wait_until(lambda: len(set(sandbox_containers()) - before) == 2, "both containers up", timeout_s=600)
        else:
            wait_until(lambda: len(processes_running("sleep 600")) == 2, "both solutions running", timeout_s=600)
        assert run.poll() is None, run.communicate()[0].decode()[-3000:]
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=600)[0].decode()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 1 and "interrupted" in output, output[-3000:]
    assert {r["status"] for r in rollouts(gateway)} == {"cancelled"}
    assert all(r["error"].startswith("interrupted: the runner stopped") for r in rollouts(gateway))
    if sandbox == "docker":
        assert set(sandbox_containers()) - before == set()
    else:
        wait_until(lambda: not processes_running("sleep 600"), "the solutions' processes to be gone", timeout_s=120)


def processes_running(command_line: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().replace(b"\0", b" ").strip() == command_line.encode():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_sigterm_stops_an_eval_which_still_writes_the_eval_json_of_what_it_has(sqlite_db, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESSRL_ADMIN_KEY", raising=False)
    engine = FakeEngine(script=solving_script(TASKS), record_requests=False)
    out = tmp_path / "eval-out"
    with BackgroundServer(create_fake_engine_app(engine)) as fake:
        settings = gateway_settings(sqlite_db, fake.url, admin_key=admin_key(create=True))
        with BackgroundGateway(settings) as gateway:
            engine.delay_s = 600.0  # from now on every model call hangs: the rollouts wait on the engine
            command = [sys.executable, "-m", "harnessrl.cli", "eval", "--tasks", "builtin:arithmetic", "--split"]
            command += ["test", "--harness", "oneshot", "--policies", "base", "-k", "1", "--run", "cli-run"]
            command += ["--out", str(out), "--concurrency", "2", "--gateway", gateway.url]
            evaluation = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                wait_until(
                    lambda: (
                        evaluation.poll() is not None
                        or len([r for r in rollouts(gateway) if r["status"] == "running"]) == 2
                    ),
                    "two rollouts waiting on the engine",
                    timeout_s=600,
                )
                assert evaluation.poll() is None, evaluation.communicate()[0].decode()[-3000:]
                evaluation.send_signal(signal.SIGTERM)
                output = evaluation.communicate(timeout=600)[0].decode()
            finally:
                if evaluation.poll() is None:
                    os.killpg(evaluation.pid, signal.SIGKILL)
            left = rollouts(gateway)
    assert evaluation.returncode == 1 and "interrupted: eval.json holds" in output, output[-3000:]
    document = json.loads((out / "eval.json").read_text())
    assert document["interrupted"] is True and document["run"] == "cli-run"
    assert {r["status"] for r in left} == {"cancelled"}
