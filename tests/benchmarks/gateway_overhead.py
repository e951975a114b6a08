"""Gateway overhead: a zero-latency fake engine called directly vs through the recording gateway.

Run: `.venv/bin/python tests/benchmarks/gateway_overhead.py [--calls N] [--out FILE]`.
Prints and writes (JSON) p50/p99 latency, added latency and calls/s at concurrency 1, 16 and 64.
Direct and gateway runs alternate in one process tree on the same cores, so ratios are fair;
absolute times on a shared 2-core machine are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from harnessrl.engine.process import ManagedProcess
from harnessrl.server import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from tests.benchmarks.loadgen import post_request, run_load  # noqa: E402

HOST = "127.0.0.1"
# The load sends up to 64 calls at once on one rollout, past a sandbox's caps (32 in flight, 64 connections).
UNCAPPED = ["--token-max-in-flight", "4096", "--token-max-connections", "4096"]
BODY = {
    "model": "policy",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List the files in the repo."},
    ],
    "max_tokens": 64,
}
DEFAULT_OUT = Path(__file__).parent / "results" / "gateway_overhead.json"
ADMIN_KEY = "bench-admin-key"  # the control plane needs one (rollout creation)


def start(command: list[str], port: int, log: Path) -> ManagedProcess:
    process = ManagedProcess(command, f"http://{HOST}:{port}", log)
    process.start().wait_healthy(60)
    return process


def measure(engine_port: int, gateway_port: int, token: str, calls: int) -> list[dict]:
    direct = post_request(
        HOST,
        engine_port,
        "/v1/chat/completions",
        {**BODY, "model": "fake-base", "return_token_ids": True, "logprobs": True},
    )
    via = post_request(HOST, gateway_port, f"/r/{token}/v1/chat/completions", BODY)
    results = []
    for concurrency in (1, 16, 64):
        n = calls if concurrency == 1 else calls * 2
        asyncio.run(run_load(HOST, gateway_port, via, concurrency, min(n, 200)))  # warm-up
        base = asyncio.run(run_load(HOST, engine_port, direct, concurrency, n)).summary()
        gateway = asyncio.run(run_load(HOST, gateway_port, via, concurrency, n)).summary()
        results.append(
            {
                "concurrency": concurrency,
                "direct": base,
                "gateway": gateway,
                "added_p50_ms": round(gateway["p50_ms"] - base["p50_ms"], 3),
                "added_p99_ms": round(gateway["p99_ms"] - base["p99_ms"], 3),
                "recorded_calls_per_s": gateway["calls_per_s"],
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-bench-"))
    engine_port, gateway_port = free_port(), free_port()
    engine = start(
        [sys.executable, "-m", "tests.fake_engine", "--port", str(engine_port)], engine_port, workdir / "engine.log"
    )
    gateway = start(
        [
            sys.executable,
            "-m",
            "harnessrl.cli",
            "serve",
            "--engine-url",
            engine.url,
            "--port",
            str(gateway_port),
            "--admin-key",
            ADMIN_KEY,
            "--database-url",
            f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
            *UNCAPPED,
        ],
        gateway_port,
        workdir / "gateway.log",
    )
    try:
        import httpx

        token = httpx.post(
            f"{gateway.url}/api/rollouts", json={"run": "bench", "task": "overhead"}, headers={"x-admin-key": ADMIN_KEY}
        ).json()["token"]
        results = measure(engine_port, gateway_port, token, args.calls)
    finally:
        gateway.stop()
        engine.stop()
    report = {"benchmark": "gateway_overhead", "recording": "sqlite (WAL)", "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{'conc':>5} {'direct p50':>11} {'gw p50':>8} {'added p50':>10} {'added p99':>10} {'gw calls/s':>11}")
    for r in results:
        print(
            f"{r['concurrency']:>5} {r['direct']['p50_ms']:>11.2f} {r['gateway']['p50_ms']:>8.2f} "
            f"{r['added_p50_ms']:>10.2f} {r['added_p99_ms']:>10.2f} {r['recorded_calls_per_s']:>11.0f}"
        )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
