"""The peers the peers benchmark runs side by side, each as a server process in its own pinned virtual
environment (kept under ~/.cache/harnessrl/peers): harnessrl's gateway, LiteLLM's proxy, OpenEnv's
CaptureServer."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from harnessrl.engines.process import ManagedProcess
from harnessrl.server import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from tests.benchmarks.loadgen import post_request  # noqa: E402

HOST = "127.0.0.1"
ADMIN_KEY = "bench-admin-key"
LITELLM_KEY = "sk-" + secrets.token_hex(32)  # the proxy refuses to start without a strong master key
PEER_HOME = Path.home() / ".cache" / "harnessrl" / "peers"
PINS = {"litellm": ["litellm[proxy]==1.108.7"], "openenv": ["openenv==0.10.0"]}
MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files in the repo."},
]
RECORDING = {"return_token_ids": True, "logprobs": True}  # what a recording proxy needs of the engine
CAPTURE_SERVER = """
import sys, uvicorn
from openenv.core.harness.capture.server import create_app
app = create_app(llm_url=sys.argv[1], model="fake-base", capture_level="tokens", admin_key=sys.argv[3],
                 max_output_tokens=0)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""


LITELLM_CONFIG = """model_list:
  - model_name: policy
    litellm_params:
      model: hosted_vllm/fake-base
      api_base: {engine}/v1
      api_key: none
litellm_settings:
  drop_params: false
"""


def peer_python(name: str) -> Path:
    """The peer's own environment, created from the package index with its pins on first use."""
    venv = PEER_HOME / name
    python = venv / "bin" / "python"
    marker = venv / "pins.txt"
    if not python.exists() or not marker.exists() or marker.read_text() != "\n".join(PINS[name]):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS[name]], check=True)
        marker.write_text("\n".join(PINS[name]))
    return python


def wait_for(url: str, process: ManagedProcess, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"{url} exited:\n{process.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not come up:\n{process.tail()}")


@dataclass
class Peer:
    """A proxy under test: how to reach it and how to open a session (rollout) on it."""

    name: str
    process: ManagedProcess | None
    port: int
    session: Callable[[], dict[str, str]]  # a fresh session: its chat completions "path" and "auth" header
    body_extra: dict  # what the client must add for the peer to record token ids and logprobs
    end: Callable[[dict[str, str]], None] | None = None  # ends a session (None: the peer keeps none)

    def request(self, stream: bool, session: dict[str, str] | None = None) -> bytes:
        session = session or self.session()
        body = {
            "model": session.get("model", "policy"),
            "messages": MESSAGES,
            "max_tokens": 64,
            **self.body_extra,
            "stream": stream,
        }
        return post_request(HOST, self.port, session["path"], body, {"authorization": session["auth"]})

    def cpu_s(self) -> float:
        """CPU seconds used so far by the peer's process tree."""
        if self.process is None or self.process.pid is None:
            return 0.0
        root = psutil.Process(self.process.pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total


def start_peers(workdir: Path, engine_url: str, otlp_endpoint: str | None = None) -> dict[str, Peer]:
    peers: dict[str, Peer] = {}
    port = free_port()
    gateway = ManagedProcess(
        [
            sys.executable,
            "-m",
            "harnessrl.cli",
            "serve",
            "--engine-url",
            engine_url,
            "--port",
            str(port),
            "--admin-key",
            ADMIN_KEY,
            "--database-url",
            f"sqlite+aiosqlite:///{workdir / 'harnessrl.db'}",
            *(["--otlp-endpoint", otlp_endpoint] if otlp_endpoint else []),
            # the load sends up to 64 calls at once on one session (rollout), past a sandbox's caps
            *("--token-max-in-flight", "4096", "--token-max-connections", "4096"),
        ],
        f"http://{HOST}:{port}",
        workdir / "harnessrl.log",
    ).start()
    wait_for(f"http://{HOST}:{port}/health", gateway)

    def rollout(url: str = f"http://{HOST}:{port}") -> dict[str, str]:
        created = httpx.post(
            f"{url}/api/rollouts", json={"run": "bench", "task": "peers"}, headers={"x-admin-key": ADMIN_KEY}
        ).json()
        token = created["token"]
        return {"path": f"/r/{token}/v1/chat/completions", "auth": f"Bearer {token}", "id": str(created["id"])}

    def end(session: dict[str, str], url: str = f"http://{HOST}:{port}") -> None:
        body = {"status": "finished", "rewards": {"bench": 1.0}}
        ended = httpx.post(f"{url}/api/rollouts/{session['id']}/end", json=body, headers={"x-admin-key": ADMIN_KEY})
        ended.raise_for_status()

    peers["harnessrl"] = Peer("harnessrl", gateway, port, rollout, {}, end)

    port = free_port()
    capture = ManagedProcess(
        [str(peer_python("openenv")), "-c", CAPTURE_SERVER, f"{engine_url}/v1", str(port), ADMIN_KEY],
        f"http://{HOST}:{port}",
        workdir / "capture.log",
    ).start()
    wait_for(f"http://{HOST}:{port}/health", capture)

    def session(url: str = f"http://{HOST}:{port}") -> dict[str, str]:
        minted = httpx.post(f"{url}/sessions", json={}, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        minted.raise_for_status()
        return {"path": "/v1/chat/completions", "auth": f"Bearer {minted.json()['session_id']}"}

    peers["capture_server"] = Peer("capture_server", capture, port, session, {})

    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(LITELLM_CONFIG.format(engine=engine_url))
    litellm = ManagedProcess(
        [
            str(peer_python("litellm").parent / "litellm"),
            "--config",
            str(config),
            "--host",
            HOST,
            "--port",
            str(port),
            "--num_workers",
            "1",
        ],
        f"http://{HOST}:{port}",
        workdir / "litellm.log",
        env={**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": LITELLM_KEY},
    ).start()
    wait_for(f"http://{HOST}:{port}/health/liveliness", litellm, timeout_s=240)
    peers["litellm"] = Peer(
        "litellm", litellm, port, lambda: {"path": "/v1/chat/completions", "auth": f"Bearer {LITELLM_KEY}"}, RECORDING
    )
    return peers
