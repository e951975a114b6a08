"""The peers the peers benchmark runs side by side, each as a server process in its own pinned virtual
environment (kept under ~/.cache/harnessrl/peers): harnessrl's gateway, LiteLLM's proxy, OpenEnv's
CaptureServer and rLLM's model gateway (traces stored before answering, and in the background, its
default); and the load's shape: a coding agent's body of BODY_WORDS words, sessions of SESSION_TURNS
calls, an answer of REPLY_TOKENS tokens."""

from __future__ import annotations

import itertools
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from harnessrl.engine.process import ManagedProcess
from harnessrl.server import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from tests.benchmarks.loadgen import post_request  # noqa: E402

HOST = "127.0.0.1"
ADMIN_KEY = "bench-admin-key"
LITELLM_KEY = "sk-" + secrets.token_hex(32)  # the proxy refuses to start without a strong master key
PEER_HOME = Path.home() / ".cache" / "harnessrl" / "peers"
PINS = {
    "litellm": ["litellm[proxy]==1.108.7"],
    "openenv": ["openenv==0.10.0"],
    "rllm": ["rllm-model-gateway==0.1.0", "uvloop==0.21.0", "httptools==0.6.4"],
}
BODY_WORDS = 284  # an agent's system prompt and task: the words of the chat body's messages
SESSION_TURNS = 32  # calls per session (rollout) before the load moves to a fresh one
REPLY_TOKENS = 32  # the fake engine's answer (tests/fake_engine.py --reply-tokens)
_INSTRUCTIONS = (
    "You are a coding agent working in a repository. Read files before you change them, run the tests "
    "after each change, keep diffs small and explain what you did in one short paragraph at the end. "
)
_TASK = "List the files in the repo, find the failing test and fix the bug it names without touching the test."


def _words(text: str, count: int) -> str:
    words = text.split()
    return " ".join(words[i % len(words)] for i in range(count))


MESSAGES = [
    {"role": "system", "content": _words(_INSTRUCTIONS, BODY_WORDS - len(_TASK.split()))},
    {"role": "user", "content": _TASK},
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


RLLM_CONFIG = """host: 127.0.0.1
port: {port}
db_path: {db}
store_worker: sqlite
sync_traces: {sync}
log_level: WARNING
workers:
  - url: {engine}/v1
    worker_id: "0"
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

    def requests(self, stream: bool, calls: int) -> Iterator[bytes]:
        """Every call's request for a load of ``calls``: SESSION_TURNS calls on one session, then on a
        fresh one (all opened here, before the load's clock starts)."""
        sessions = [self.request(stream) for _ in range(-(-calls // SESSION_TURNS))]
        return itertools.cycle([request for request in sessions for _ in range(SESSION_TURNS)])

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


def start_engine(workdir: Path, delay_s: float = 0.0) -> ManagedProcess:
    """The fake engine every peer serves, answering REPLY_TOKENS tokens, each answer after ``delay_s``."""
    port = free_port()
    engine = ManagedProcess(
        [sys.executable, "-m", "tests.fake_engine", "--port", str(port), "--reply-tokens", str(REPLY_TOKENS)]
        + ["--delay-s", str(delay_s)],
        f"http://{HOST}:{port}",
        workdir / "engine.log",
    ).start()
    wait_for(f"{engine.url}/health", engine)
    return engine


def start_peers(workdir: Path, engine_url: str, otlp_endpoint: str | None = None) -> dict[str, Peer]:
    return {
        "harnessrl": start_harnessrl(workdir, engine_url, otlp_endpoint),
        "capture_server": start_capture_server(workdir, engine_url),
        "rllm_sync": start_rllm(workdir, engine_url, sync=True),
        "rllm": start_rllm(workdir, engine_url, sync=False),
        "litellm": start_litellm(workdir, engine_url),
    }


def start_harnessrl(workdir: Path, engine_url: str, otlp_endpoint: str | None = None) -> Peer:
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

    return Peer("harnessrl", gateway, port, rollout, {}, end)


def start_capture_server(workdir: Path, engine_url: str) -> Peer:
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

    return Peer("capture_server", capture, port, session, {})


def start_rllm(workdir: Path, engine_url: str, sync: bool) -> Peer:
    """rLLM's model gateway: ``sync`` stores each trace before answering; without, a task stores it
    after the answer went out (its default). It adds the recording fields to every body itself."""
    port = free_port()
    name = "rllm_sync" if sync else "rllm"
    config = workdir / f"{name}.yaml"
    config.write_text(
        RLLM_CONFIG.format(port=port, db=workdir / f"{name}.db", sync=str(sync).lower(), engine=engine_url)
    )
    rllm = ManagedProcess(
        [str(peer_python("rllm")), "-m", "rllm_model_gateway", "--config", str(config)],
        f"http://{HOST}:{port}",
        workdir / f"{name}.log",
    ).start()
    wait_for(f"http://{HOST}:{port}/health", rllm)

    def session(url: str = f"http://{HOST}:{port}") -> dict[str, str]:
        minted = httpx.post(f"{url}/sessions", json={})
        minted.raise_for_status()
        sid = minted.json()["session_id"]
        return {"path": f"/sessions/{sid}/v1/chat/completions", "auth": "Bearer none", "model": "fake-base"}

    return Peer(name, rllm, port, session, {})


def start_litellm(workdir: Path, engine_url: str) -> Peer:
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
    return Peer(
        "litellm", litellm, port, lambda: {"path": "/v1/chat/completions", "auth": f"Bearer {LITELLM_KEY}"}, RECORDING
    )
