"""Two `harnessrl run` processes on one run against one gateway share its slots; one is killed with
SIGKILL mid-run and the other plays its expired claims: every (round, task, index) ends exactly once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator

import pytest

from harnesses.task import builtin_tasks_path
from harnessrl.server import BackgroundGateway, BackgroundServer
from harnessrl.settings import admin_key
from store.leases import TAKEN_OVER
from tests import http_calls as http
from tests.builders import gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.integration.test_run_cli import TASKS, rollouts, run_command
from tests.unit.test_runner import solving_script
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap (apt-get install bubblewrap)")


@pytest.fixture
def shared_gateway(sqlite_db, tmp_path, monkeypatch) -> Iterator[BackgroundGateway]:
    """One gateway (fake engine) both runners use, with the key `harnessrl run` finds by itself."""
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESSRL_ADMIN_KEY", raising=False)
    engine = FakeEngine(script=solving_script(TASKS), record_requests=False)
    with BackgroundServer(create_fake_engine_app(engine)) as fake:
        with BackgroundGateway(gateway_settings(sqlite_db, fake.url, admin_key=admin_key(create=True))) as gateway:
            yield gateway


def worker_command(gateway, tasks_file, worker: str) -> list[str]:
    command = run_command(gateway, tasks_file)
    command[command.index("--concurrency") + 1] = "4"
    return [*command, "--worker-id", worker]  # run_command's lease: long enough on a busy machine


def by_worker(gateway, worker: str, status: str) -> int:
    return sum(r["meta"].get("worker") == worker and r["status"] == status for r in rollouts(gateway))


def test_two_runners_share_a_run_and_the_survivor_plays_a_killed_ones_claims(shared_gateway, tmp_path):
    gateway = shared_gateway
    tasks_file = tmp_path / "tasks.jsonl"
    lines = (builtin_tasks_path() / "builtin.jsonl").read_text().splitlines()
    tasks_file.write_text("\n".join(x for x in lines if any(f'"name": "{t.name}"' in x for t in TASKS)) + "\n")
    killed = subprocess.Popen(
        worker_command(gateway, tasks_file, "doomed"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    survivor = subprocess.Popen(
        worker_command(gateway, tasks_file, "survivor"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:

        def doomed_mid_run() -> bool:
            assert killed.poll() is None, "the first runner ended before it was killed"
            return by_worker(gateway, "doomed", "finished") >= 4 and by_worker(gateway, "doomed", "running") >= 1

        wait_until(doomed_mid_run, "the first runner mid-run", timeout_s=600, interval_s=0.1)
        os.killpg(killed.pid, signal.SIGKILL)  # mid-run: rollouts in flight, their leases held
        killed.wait()
        left_running = by_worker(gateway, "doomed", "running")
        output, _ = survivor.communicate(timeout=600)
    finally:
        for process in (killed, survivor):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert survivor.returncode == 0, output
    final = rollouts(gateway)
    slots = Counter((r["task"], r["meta"]["index"]) for r in final if r["status"] in ("finished", "failed"))
    assert slots == Counter({(t.name, i): 1 for t in TASKS for i in range(4)})  # each slot ended once
    assert all(r["status"] == "finished" and r["reward"] == 1.0 for r in final if r["status"] != "cancelled")
    cancelled = [r for r in final if r["status"] == "cancelled"]
    # Only the killed runner's rollouts were cancelled, by the take-over of their expired leases.
    assert len(cancelled) >= left_running >= 1
    assert all(r["meta"]["worker"] == "doomed" and r["error"] == TAKEN_OVER for r in cancelled)
    assert {r["meta"]["worker"] for r in final if r["status"] == "finished"} == {"doomed", "survivor"}
    groups = http.get(
        f"{gateway.url}/api/groups", params={"run": "cli-run", "limit": 100}, headers={"x-admin-key": admin_key()}
    ).json()["data"]
    assert sorted(g["status"] for g in groups) == ["ready"] * len(TASKS)  # each group once, complete
