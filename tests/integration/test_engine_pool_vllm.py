"""Two real vLLM-CPU engines (the tiny model) behind one gateway: rollouts spread over both, a published
adapter is on both before any call uses it, and when one engine is killed with SIGKILL mid-run its
rollouts finish on the other (the move recorded on the call)."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading

import httpx
import pytest

from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.server import BackgroundGateway, free_port
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.integration.adapters import save_random_adapter
from tests.waiting import wait_until

ROLLOUTS = 4
TURNS_AFTER_KILL = 3


def served_adapters(url: str) -> set[str]:
    return {m["id"] for m in http.get(f"{url}/v1/models", timeout=120).json()["data"] if m.get("parent")}


def chat(gateway: BackgroundGateway, token: str, turn: int) -> int:
    body = {"model": "policy", "max_tokens": 4, "messages": [{"role": "user", "content": f"Turn {turn}: hi"}]}
    return http.post(f"{gateway.url}/r/{token}/v1/chat/completions", json=body, timeout=300).status_code


def recorded_calls(database_url: str) -> list[tuple[int, str, str | None, str]]:
    with sqlite3.connect(database_url.split("///", 1)[1]) as db:
        return db.execute("SELECT rollout_id, engine, moved_from, engine_model FROM calls ORDER BY id").fetchall()


@pytest.mark.engines(1)  # starts its own vLLM engine
def test_two_vllm_engines_share_rollouts_get_every_adapter_and_survive_one_killed(
    vllm_servers, tiny_model_dir, sqlite_db, tmp_path
):
    shared = vllm_servers["tiny"]  # the session's engine; the second one is this test's to kill
    second = ManagedProcess.vllm(
        EngineLaunch(model_dir=tiny_model_dir, port=free_port(), max_model_len=2048, kv_cache_gib=1, max_lora_rank=8),
        tmp_path / "second.log",
    )
    adapter = save_random_adapter(tiny_model_dir, tmp_path / "lora", rank=8, seed=3)
    settings = gateway_settings(
        sqlite_db, shared.url, engine_urls=(shared.url, second.url), engine_probe_interval_s=0.2, follow_interval_s=0
    )
    try:
        second.start().wait_healthy(900)
        with BackgroundGateway(settings) as gateway:
            admin = httpx.Client(base_url=gateway.url, headers=ADMIN_HEADERS, timeout=300)
            published = admin.post("/admin/adapters", json={"version": 1, "path": str(adapter)})
            assert published.status_code == 200, published.text
            assert "policy-v1" in served_adapters(shared.url) and "policy-v1" in served_adapters(second.url)

            tokens = [
                admin.post("/api/rollouts", json={"run": "pool", "task": f"t{i}"}).json()["token"]
                for i in range(ROLLOUTS)
            ]
            assert [chat(gateway, token, 0) for token in tokens] == [200] * ROLLOUTS
            first_engines = [engine for _, engine, _, _ in recorded_calls(sqlite_db)]
            assert set(first_engines) == {shared.url, second.url}  # spread over both

            statuses: list[int] = []

            def rollout(token: str) -> None:
                for turn in range(1, TURNS_AFTER_KILL + 1):
                    statuses.append(chat(gateway, token, turn))

            threads = [threading.Thread(target=rollout, args=(token,)) for token in tokens]
            for thread in threads:
                thread.start()
            pool = gateway.app.state.gateway.engine
            # a call in flight on it, or (under load the calls are slow to come) none left to come
            wait_until(
                lambda: pool.members[1].in_flight or not any(t.is_alive() for t in threads),
                "a call in flight on the second engine",
                timeout_s=600,
                interval_s=0.005,
            )
            os.killpg(os.getpgid(second.pid), signal.SIGKILL)  # mid-run: a call in flight on it
            for thread in threads:
                thread.join(timeout=600)
            # one call each after the kill for certain (under load the threads may end before it)
            statuses += [chat(gateway, token, TURNS_AFTER_KILL + 1) for token in tokens]

            assert statuses == [200] * (ROLLOUTS * (TURNS_AFTER_KILL + 1))
            calls = recorded_calls(sqlite_db)
            assert {model for *_, model in calls} == {"policy-v1"}
            for rollout_id in {r for r, *_ in calls}:
                engines = [(engine, moved) for r, engine, moved, _ in calls if r == rollout_id]
                if engines[0][0] == second.url:  # killed under it: moved once to the other, then stays
                    moved = [i for i, (_, m) in enumerate(engines) if m is not None]
                    assert len(moved) == 1 and engines[moved[0]] == (shared.url, second.url), engines
                    assert all(engine == shared.url for engine, _ in engines[moved[0] :]), engines
                else:
                    assert {engine for engine, _ in engines} == {shared.url}, engines
    finally:
        second.stop()
        for name in served_adapters(shared.url):  # the shared engine outlives this test
            http.post(f"{shared.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)
