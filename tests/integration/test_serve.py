"""`harnessrl serve --model DIR`: the engine lives and dies with the gateway."""

from __future__ import annotations

import os
import signal
import stat

import pytest

from store.database import sqlite_url
from tests import http_calls as http
from tests.integration.processes import children_of, pid_alive, serve_process
from tests.waiting import wait_until

START_TIMEOUT_S = 900


def start_serve(tiny_model_dir, tmp_path):
    gateway = serve_process(
        tmp_path,
        "--model",
        str(tiny_model_dir),
        "--max-model-len",
        "1024",
        "--database-url",
        sqlite_url(tmp_path / "serve.db"),
    )
    gateway.env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HARNESSRL_HOME": str(tmp_path / "home")}
    gateway.start().wait_healthy(START_TIMEOUT_S)
    [engine_pid] = children_of(gateway.pid)
    return gateway, engine_pid


@pytest.mark.engines(1)  # starts its own vLLM engine
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_stopping_the_gateway_stops_its_engine(tiny_model_dir, tmp_path, how):
    gateway, engine_pid = start_serve(tiny_model_dir, tmp_path)
    try:
        reply = http.post(
            f"{gateway.url}/v1/chat/completions",
            timeout=120,
            json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        assert reply.status_code == 200, reply.text
        os.kill(gateway.pid, how)
        # vLLM's own shutdown takes a while on a busy machine: the deadline only guards against a hang
        wait_until(lambda: not pid_alive(engine_pid), "the engine to die with its gateway", timeout_s=300)
    finally:
        gateway.stop()
        if pid_alive(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)


@pytest.mark.engines(1)
def test_a_dying_engine_stops_the_gateway_with_its_last_log_lines(tiny_model_dir, tmp_path):
    gateway, engine_pid = start_serve(tiny_model_dir, tmp_path)
    try:
        os.killpg(os.getpgid(engine_pid), signal.SIGKILL)
        wait_until(lambda: not gateway.alive(), "the gateway to stop without its engine", timeout_s=300)
        output = gateway.tail(200)
        assert "vLLM died" in output and ("last lines of" in output or "that explain it" in output)
    finally:
        gateway.stop()


def test_serve_creates_a_private_admin_key_once_and_guards_the_control_plane_with_it(tmp_path):
    """`harnessrl serve` without --admin-key on the fake engine: the key file, the printed viewer URL,
    and the same key after a restart."""
    from harnessrl.server import BackgroundServer
    from tests.fake_engine import create_fake_engine_app

    key_file = tmp_path / "home" / "admin.key"
    with BackgroundServer(create_fake_engine_app()) as fake:
        database = ("--engine-url", fake.url, "--database-url", sqlite_url(tmp_path / "serve.db"))
        keys = []
        for _ in range(2):  # first start creates the key, the second reuses it
            gateway = serve_process(tmp_path, *database, admin_key=None).start()
            try:
                gateway.wait_healthy(120)
                key = key_file.read_text().strip()
                assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
                wait_until(lambda: f"/ui/#key={key}" in gateway.tail(50), "the viewer URL logged", timeout_s=120)  # noqa: B023
                assert http.get(f"{gateway.url}/api/runs", timeout=60).status_code == 401
                assert http.get(f"{gateway.url}/api/runs", headers={"x-admin-key": key}, timeout=60).status_code == 200
                assert (
                    http.get(
                        f"{gateway.url}/api/runs", headers={"x-admin-key": key, "host": "evil.example"}, timeout=60
                    ).status_code
                    == 421
                )
                keys.append(key)
            finally:
                gateway.stop()
        assert keys[0] == keys[1]
