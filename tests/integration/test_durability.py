"""kill -9 the gateway during a burst: every response a client fully received is in the store."""

from __future__ import annotations

import os
import signal
import threading

import httpx

from tests import http_calls as http
from tests.builders import ADMIN_HEADERS
from tests.integration.processes import serve_process
from tests.streams import streamed_call_id

CLIENTS = 8
KILL_AFTER = 40  # fully received responses before the kill


def burst(base_url: str, token: str, received: list[int], stop: threading.Event, index: int) -> None:
    body = {
        "model": "policy",
        "messages": [{"role": "user", "content": f"client {index}: say something"}],
        "max_tokens": 4,
        "stream": index % 2 == 0,
    }
    with httpx.Client(base_url=base_url, timeout=60, headers={"authorization": f"Bearer {token}"}) as http:
        while not stop.is_set():
            try:
                with http.stream("POST", "/v1/chat/completions", json=body) as response:
                    payload = response.read()
                    complete = response.status_code == 200 and (
                        not body["stream"] or payload.rstrip().endswith(b"[DONE]")
                    )
                    if complete:  # a stream names its call at its end (the call id header comes first)
                        received.append(
                            streamed_call_id(payload)
                            if body["stream"]
                            else int(response.headers["x-harnessrl-call-id"])
                        )
            except httpx.HTTPError:
                return


def stored_call_ids(base_url: str, rollout_id: int) -> set[int]:
    ids, after = set(), 0
    while True:
        page = http.get(
            f"{base_url}/api/rollouts/{rollout_id}/calls", params={"after": after, "limit": 1000}, headers=ADMIN_HEADERS
        ).json()
        ids |= {call["id"] for call in page["data"]}
        if page["next_cursor"] is None:
            return ids
        after = page["next_cursor"]


def test_kill_9_during_a_burst_loses_no_delivered_call(vllm_servers, database_url, tmp_path):
    engine_args = ("--engine-url", vllm_servers["tiny"].url, "--database-url", database_url)
    gateway = serve_process(tmp_path, *engine_args).start()
    gateway.wait_healthy(120)
    rollout = http.post(
        f"{gateway.url}/api/rollouts", json={"run": "durability", "task": "burst"}, headers=ADMIN_HEADERS
    ).json()
    received: list[int] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=burst, args=(gateway.url, rollout["token"], received, stop, i)) for i in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    try:
        while len(received) < KILL_AFTER and any(t.is_alive() for t in threads):
            threading.Event().wait(0.05)
        os.kill(gateway.pid, signal.SIGKILL)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    delivered = set(received)
    assert len(delivered) >= KILL_AFTER

    restarted = serve_process(tmp_path, *engine_args).start()
    try:
        restarted.wait_healthy(120)
        stored = stored_call_ids(restarted.url, rollout["id"])
    finally:
        restarted.stop()
    assert delivered <= stored, f"lost {sorted(delivered - stored)}"
