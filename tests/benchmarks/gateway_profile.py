"""Where a recorded call's CPU goes: the gateway sampled by py-spy under the peers benchmark's load, per stage.

Run: `.venv/bin/python tests/benchmarks/gateway_profile.py [--calls N] [--concurrency C] [--stream]
[--py-spy PATH] [--out FILE]` (py-spy comes with the dev extra; it needs ptrace, as root here).

The gateway serves the fake engine (tests/fake_engine.py) over SQLite, as in tests/benchmarks/peers.py,
with the same bodies and sessions (tests/benchmarks/peer_servers.py: BODY_WORDS, SESSION_TURNS).
py-spy samples the gateway's busy threads while the load runs; each sample is charged to the stage of
its innermost frame in the project (gateway/, store/, ...) or the framework (uvicorn, starlette, FastAPI):
library frames (pydantic, sqlite3, aiohttp) count for the code that called them, and a sample with
neither is the event loop's (uvloop's C code). Only threads holding the GIL are sampled. Printed and
written (JSON): each stage's CPU milliseconds per call (its share of the samples times the gateway's
measured CPU per call), socket writes apart (``WRITES``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from tests.benchmarks.loadgen import run_load  # noqa: E402
from tests.benchmarks.peer_servers import HOST, start_engine, start_harnessrl  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "gateway_profile.json"
# (stage, path prefixes of a frame's file, function names or None for any): the first match wins, from
# the innermost project frame outwards. Order matters where one module serves two stages.
STAGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...] | None], ...] = (
    ("commit (store)", ("store/",), None),
    ("answer (response out)", ("gateway/delivery/", "gateway/routes.py"), None),
    ("answer (response out)", ("gateway/openai/serving.py",), ("_client_chat", "_client_completion")),
    ("response parse", ("gateway/engine/token_prefix.py",), ("loads_answer", "read", "_known_end")),
    ("engine request", ("gateway/engine/", "gateway/recording/engine_request.py"), None),
    ("record (graph, arrays, tags)", ("gateway/recording/", "gateway/request/tagging.py"), None),
    ("identity", ("gateway/request/identity.py",), None),
    ("parse and validate", ("gateway/request/", "gateway/openai/", "gateway/anthropic/", "gateway/responses/"), None),
    ("policy", ("gateway/policy/",), None),
    ("metrics", ("gateway/metrics.py",), None),
    ("boundary (middleware)", ("gateway/boundary/",), None),
    ("state and errors", ("gateway/",), None),
)
PROJECT = ("gateway/", "store/", "harnessrl/")  # py-spy names files relative to their sys.path entry
SERVER = ("uvicorn/", "starlette/", "fastapi/")  # the framework: its frames are charged to it, not to a caller
IDLE = "idle threads"
EVENT_LOOP = "event loop (uvloop: sockets, HTTP parsing, callbacks)"  # its C code, below any Python frame
LOOP = "Runner.run (asyncio/runners.py"  # the innermost Python frame while the loop runs C code
# A socket write on loopback wakes the reader (the client, the engine), which on a busy machine may take
# the gateway's core while the write holds the GIL: sampled as held, mostly not the gateway's CPU (perf
# puts all kernel time at a seventh of it). Reported apart, outside the CPU shares.
WRITES = (
    "StreamWriter._writelines (aiohttp/http_writer.py",
    "BatchedWrites.flush (gateway/boundary/write_batching.py",
    "RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py",
    "_Connection.send (gateway/engine/http1.py",
)
SOCKET_WRITES = "socket writes (with the woken reader's time on a busy core)"
# Threads blocked in these frames wait, and py-spy cannot always tell (a queue's get is a lock's wait).
WAITING = ("_connection_worker_thread (aiosqlite/core.py:59)", "_worker (concurrent/futures/thread.py:81)")


def stage_of(stack: list[str]) -> str:
    """The stage a sampled stack (outermost frame first, py-spy's ``name (file:line)``) is charged to."""
    if stack[-1] in WAITING:
        return IDLE
    if stack[-1].startswith(WRITES):
        return SOCKET_WRITES
    if stack[-1].startswith(LOOP):
        return EVENT_LOOP
    for frame in reversed(stack):
        name, _, where = frame.partition(" (")
        path = where.rsplit(":", 1)[0]
        if path.startswith(SERVER):
            return "server (uvicorn, starlette, FastAPI)"
        if not path.startswith(PROJECT):
            continue
        for stage, files, functions in STAGES:
            if path.startswith(files) and (functions is None or name in functions):
                return stage
    return EVENT_LOOP


def stages_from_raw(text: str) -> Counter[str]:
    """Samples per stage from py-spy's raw (collapsed) output: ``frame;frame;... count`` per line."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stage_of(stack.split(";"))] += int(count)
    return counts


def profile(args: argparse.Namespace) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-profile-"))
    engine = start_engine(workdir)
    gateway = start_harnessrl(workdir, engine.url)
    try:
        asyncio.run(run_load(HOST, gateway.port, gateway.request(args.stream), args.concurrency, 200))  # warm-up
        requests = gateway.requests(args.stream, args.calls)  # its sessions opened before sampling
        raw = workdir / "profile.txt"
        sampler = subprocess.Popen(
            [args.py_spy, "record", "--pid", str(gateway.process.pid), "--rate", str(args.rate), "--format", "raw"]
            + ["--nonblocking", "--gil", "-o", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # py-spy attaches
        before = gateway.cpu_s()
        result = asyncio.run(run_load(HOST, gateway.port, requests, args.concurrency, args.calls))
        cpu_ms = (gateway.cpu_s() - before) * 1000.0 / result.calls
        sampler.send_signal(signal.SIGINT)
        sampler.wait(60)
    finally:
        gateway.process.stop()
        engine.stop()
    counts = stages_from_raw(raw.read_text())
    apart = (IDLE, SOCKET_WRITES)
    busy = sum(n for stage, n in counts.items() if stage not in apart) or 1
    return {
        "benchmark": "gateway_profile",
        "concurrency": args.concurrency,
        "stream": args.stream,
        "calls": result.calls,
        "calls_per_s": round(result.calls_per_s, 1),
        "cpu_ms_per_call": round(cpu_ms, 3),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "samples": dict(counts.most_common()),
        # the measured CPU shared among the stages; idle threads and socket writes apart (see WRITES)
        "stages_ms_per_call": {
            stage: round(cpu_ms * n / busy, 3) for stage, n in counts.most_common() if stage not in apart
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--rate", type=int, default=997, help="py-spy samples per second")
    beside = Path(sys.executable).with_name("py-spy")  # the venv's (the dev extra pins it)
    parser.add_argument("--py-spy", default=str(beside) if beside.exists() else shutil.which("py-spy") or "py-spy")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    report = profile(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['calls_per_s']} calls/s, {report['cpu_ms_per_call']} CPU ms per call (c={args.concurrency})")
    for stage, ms in report["stages_ms_per_call"].items():
        print(f"  {stage:<55} {ms:>7.3f} ms")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
