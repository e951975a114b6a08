"""Issue 14's acceptance, all real on one machine: PostgreSQL, 2 vLLM-CPU engines (tiny model), 2 gateways
(each over both engines), 2 `harnessrl run` workers (one per gateway) and the learner, on a run of 12
tasks x G=4. Mid-run one engine, one gateway and one worker are killed with SIGKILL. Then: every
(round, task, index) ended exactly once, every group was consumed once, every published version was on
both live engines before it was used, and each rollout's calls sat on one engine except across a
recorded failover."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

from harnesses.task import builtin_tasks_path, load_tasks
from store.leases import TAKEN_OVER
from store.store import Store
from tests import http_calls as http
from tests import waiting
from tests.builders import ADMIN_HEADERS
from tests.integration import scale_out

RUN = "scale-out"
TASKS = [t for t in load_tasks(builtin_tasks_path()) if t.dockerfile is None][:12]
G = 4
LEASE_S = 30.0  # a loaded 2-core machine stalls a worker for seconds (10 s leases expired under load 19)


def rollouts(url: str) -> list[dict]:
    return http.get(
        f"{url}/api/rollouts", params={"run": RUN, "limit": 1000}, headers=ADMIN_HEADERS, timeout=60
    ).json()["data"]


def wait_until(condition, timeout_s: float, what: str, alive=()) -> None:
    """``condition`` met, while every ``alive`` process still runs (one that died fails at once)."""

    def met() -> bool:
        for name, process in alive:
            assert process.poll() is None, f"{name} exited early"
        return condition()

    waiting.wait_until(met, what, timeout_s=timeout_s, interval_s=0.2)


def current_version(url: str) -> int:
    view = http.get(f"{url}/admin/policy", params={"policy": scale_out.POLICY}, headers=ADMIN_HEADERS, timeout=60)
    return view.json()["current_version"] if view.status_code == 200 else 0  # 404: no rollout of it yet


@pytest.mark.engines(2)  # starts its own vLLM engines
@pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers write /logs: apt-get install bubblewrap")
def test_engines_gateways_and_workers_killed_mid_run_lose_nothing_and_run_nothing_twice(
    postgres, tiny_model_dir, tmp_path
):
    database_url = postgres.create_database("scale_out")
    from migrations.runner import upgrade

    upgrade(database_url)
    logs, home = tmp_path / "logs", tmp_path / "home"
    logs.mkdir()
    tasks_file = scale_out.tasks_file(tmp_path / "tasks.jsonl", TASKS)

    engines = [scale_out.engine(tiny_model_dir, logs) for _ in range(2)]
    gateways, workers, learner, watch = [], [], None, None
    try:
        for engine in engines:
            engine.start()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda e: e.wait_healthy(600), engines))
        urls = [e.url for e in engines]
        watch = scale_out.AdapterWatch({url: url for url in urls})
        gateways = [scale_out.gateway(urls, database_url, tiny_model_dir, home, logs) for _ in range(2)]
        for gateway in gateways:
            gateway.start()
        for gateway in gateways:
            gateway.wait_healthy(300)
        learner = scale_out.learner(RUN, gateways[0].url, database_url, tiny_model_dir, home, logs)
        # w0 (on gateway-1) starts; w1 (on gateway-2) joins once the learner published v1, so both work
        # on rollouts of published versions. w0 ends only the first groups (those v1 trains on) until the
        # kills, so however fast the machine, w1 is mid-run while w0 still has work.
        hold = tmp_path / "hold"
        hold.write_text("\n".join(sorted(t.name for t in TASKS)[: scale_out.GROUPS_PER_STEP]))
        workers = [scale_out.worker("w0", gateways[0].url, RUN, tasks_file, home, logs, LEASE_S, hold)]
        wait_until(
            lambda: current_version(gateways[1].url) >= 1,
            900,
            "v1, followed by gateway-2",
            [("learner", learner), ("w0", workers[0].process)],
        )
        workers.append(scale_out.worker("w1", gateways[1].url, RUN, tasks_file, home, logs, LEASE_S))
        alive = [("learner", learner), *[(w.name, w.process) for w in workers]]

        def of_w1(status: str) -> int:
            return sum(r["status"] == status and r["meta"].get("worker") == "w1" for r in rollouts(gateways[0].url))

        wait_until(lambda: of_w1("finished") >= 1 and of_w1("running") >= 1, 600, "w1 mid-run", alive)
        _kill_group(engines[1])  # vLLM and its engine-core children
        killed_engine_at = time.time()
        time.sleep(1.0)  # pacing, not a wait: gateway-2 may move a call or two across the failover first
        _kill_group(gateways[1])
        workers[1].kill()
        killed_worker_at = time.time()
        hold.unlink()

        # The survivor plays everything left, the killed worker's expired claims included.
        out = workers[0].process.wait(timeout=900)
        assert out == 0, workers[0].log.read_text()[-3000:]
        groups = asyncio.run(_read(database_url, scale_out.read_groups))
        wait_until(
            lambda: sorted(asyncio.run(_read(database_url, scale_out.consumed_group_ids))) == sorted(groups),
            900,
            "the learner consuming every group",
            [("learner", learner)],
        )
        groups = asyncio.run(_read(database_url, scale_out.read_groups))  # as consumed, not as first read
        calls = asyncio.run(_read(database_url, scale_out.read_calls))
        consumed = asyncio.run(_read(database_url, scale_out.consumed_group_ids))
    finally:
        if watch is not None:
            watch.stop()
        for w in workers:
            if w.process.poll() is None:
                w.kill()
        if learner is not None and learner.poll() is None:
            learner.send_signal(signal.SIGTERM)
            learner.wait(300)
        for process in [*gateways, *engines]:
            process.stop()

    store_rollouts = asyncio.run(_rollouts(database_url))
    # 1. Every (round, task, index) ended exactly once; only the killed worker's rollouts were cancelled.
    slots = Counter((r["task"], r["meta"]["index"]) for r in store_rollouts if r["status"] in ("finished", "failed"))
    assert slots == Counter({(t.name, i): 1 for t in TASKS for i in range(G)})
    cancelled = [r for r in store_rollouts if r["status"] == "cancelled"]
    # The killed worker's rollouts were taken over; on a busy machine a stall longer than the lease may
    # have the survivor take over one of its own too: a lease doing its job, still ended exactly once.
    assert "w1" in {r["meta"]["worker"] for r in cancelled}
    assert {r["error"] for r in cancelled} == {TAKEN_OVER}
    assert {r["meta"]["worker"] for r in store_rollouts if r["status"] == "finished"} == {"w0", "w1"}
    # 2. Every group was consumed, once.
    assert len(groups) == len(TASKS) and set(groups.values()) == {"consumed"}
    assert sorted(consumed) == sorted(groups)
    # 3. Every version in use was on both live engines before its first call was recorded: no look at
    # an engine sent after that call found it missing (a poller slowed by the load proves less, never fails).
    first_use = {}
    for call in calls:
        first_use.setdefault(call.policy_version, call.created_at)
    assert max(first_use) >= 1, "no published version was used"
    for version, used_at in first_use.items():
        if version == 0:
            continue
        name = f"{scale_out.POLICY}-v{version}"
        for url in urls:
            if url == urls[1] and used_at >= killed_engine_at:
                continue  # that engine was dead by then
            assert watch.last_missing(url, name) < used_at, (version, url, watch.seen[url].get(name))
    # 4. A rollout's calls stay on one engine, except across a recorded failover.
    by_rollout = defaultdict(list)
    for call in calls:
        by_rollout[call.rollout_id].append(call)
    moved = 0
    for rollout_calls in by_rollout.values():
        for before, after in zip(rollout_calls, rollout_calls[1:]):
            if after.engine != before.engine:
                assert after.moved_from == before.engine, (before, after)
                moved += 1
    print(
        f"{len(calls)} calls in {len(by_rollout)} rollouts, {moved} moved across the engine failover, "
        f"versions used {sorted(first_use)}, {len(cancelled)} rollouts taken over from the killed worker "
        f"(killed at +{killed_worker_at - killed_engine_at:.1f} s after the engine)"
    )


def _kill_group(process) -> None:
    try:
        os.killpg(os.getpgid(process.pid), signal.SIGKILL)
    except ProcessLookupError:
        pass
    process._proc.wait()


async def _read(database_url: str, read):
    """``read(store, RUN)`` on a store of its own (each asyncio.run is a new event loop)."""
    store = Store.from_url(database_url)
    try:
        return await read(store, RUN)
    finally:
        await store.close()


async def _rollouts(database_url: str) -> list[dict]:
    from sqlalchemy import select

    from store.tables import Rollout, Run, Task

    store = Store.from_url(database_url)
    try:
        async with store.sessions() as session:
            rows = (
                await session.execute(
                    select(Rollout, Task.name)
                    .join(Task, Task.id == Rollout.task_id)
                    .join(Run, Run.id == Rollout.run_id)
                    .where(Run.name == RUN)
                )
            ).all()
        return [{"task": task, "status": r.status, "meta": r.meta, "error": r.error} for r, task in rows]
    finally:
        await store.close()
