"""`harnessrl serve --model DIR`: the engine lives and dies with the gateway."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from gateway.store.database import sqlite_url
from tests.integration.processes import children_of, pid_alive, serve_process

START_TIMEOUT_S = 900


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def start_serve(tiny_model_dir, tmp_path):
    gateway = serve_process(tmp_path, "--model", str(tiny_model_dir), "--max-model-len", "1024",
                            "--database-url", sqlite_url(tmp_path / "serve.db"))
    gateway.env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HARNESSRL_HOME": str(tmp_path / "home")}
    gateway.start().wait_healthy(START_TIMEOUT_S)
    [engine_pid] = children_of(gateway.pid)
    return gateway, engine_pid


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_stopping_the_gateway_stops_its_engine(tiny_model_dir, tmp_path, how):
    gateway, engine_pid = start_serve(tiny_model_dir, tmp_path)
    try:
        reply = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=120,
                           json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert reply.status_code == 200, reply.text
        os.kill(gateway.pid, how)
        assert wait_until(lambda: not pid_alive(engine_pid), 60), "the engine outlived its gateway"
    finally:
        gateway.stop()
        if pid_alive(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)


def test_a_dying_engine_stops_the_gateway_with_its_last_log_lines(tiny_model_dir, tmp_path):
    gateway, engine_pid = start_serve(tiny_model_dir, tmp_path)
    try:
        os.killpg(os.getpgid(engine_pid), signal.SIGKILL)
        assert wait_until(lambda: not gateway.alive(), 60), "the gateway kept serving without an engine"
        output = gateway.tail(200)
        assert "vLLM died" in output and "last lines of" in output
    finally:
        gateway.stop()
