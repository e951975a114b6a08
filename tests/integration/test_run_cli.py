"""`harnessrl run` as users run it: G=4, concurrency 8, 10 tasks; killed midway, rerun, resumed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from gateway.engine.fake import FakeEngine, create_fake_engine_app
from gateway.store.leases import TAKEN_OVER
from harnesses.task import builtin_tasks_path, load_tasks
from harnessrl.server import BackgroundGateway, BackgroundServer
from harnessrl.settings import admin_key
from tests.builders import gateway_settings
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
    return httpx.get(
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
    groups = httpx.get(
        f"{gateway.url}/api/groups", params={"run": "cli-run", "status": "ready"}, headers={"x-admin-key": admin_key()}
    ).json()["data"]
    assert len(groups) == 10
