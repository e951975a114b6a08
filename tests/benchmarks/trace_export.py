"""OpenTelemetry export with its collector down: the gateway's calls/s at concurrency 16, export off
vs `serve --otlp-endpoint` pointed at a port nothing listens on (every export fails and is retried in
the SDK's thread; spans pile up and are dropped).

Run: `.venv/bin/python tests/benchmarks/trace_export.py [--rounds N] [--rollouts N] [--calls N] [--out FILE]`.
Two gateways on one fake engine, measured in alternation in one process tree on the same cores: each
round, on each gateway, ``--rollouts`` rollouts of ``--calls`` calls at concurrency 16, every rollout
ended (which is what queues its trace). Prints and writes (JSON) calls/s per mode and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

from harnessrl.server import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from tests.benchmarks.gateway_overhead import ADMIN_KEY, BODY, HOST, start  # noqa: E402
from tests.benchmarks.loadgen import post_request, run_load  # noqa: E402

CONCURRENCY = 16
DEFAULT_OUT = Path(__file__).parent / "results" / "trace_export.json"


def serve(engine_url: str, port: int, workdir: Path, name: str, otlp: str | None):
    command = [sys.executable, "-m", "harnessrl.cli", "serve", "--engine-url", engine_url, "--port", str(port)]
    command += ["--admin-key", ADMIN_KEY, "--database-url", f"sqlite+aiosqlite:///{workdir / name}.db"]
    command += ["--otlp-endpoint", otlp] if otlp else []
    return start(command, port, workdir / f"{name}.log")


def one_round(port: int, rollouts: int, calls: int) -> float:
    """calls/s over ``rollouts`` rollouts of ``calls`` calls each, every one ended (wall time of it all)."""
    admin = httpx.Client(base_url=f"http://{HOST}:{port}", headers={"x-admin-key": ADMIN_KEY}, timeout=60)
    seconds = 0.0
    for _ in range(rollouts):
        rollout = admin.post("/api/rollouts", json={"run": "bench", "task": "export"}).json()
        request = post_request(HOST, port, f"/r/{rollout['token']}/v1/chat/completions", BODY)
        seconds += asyncio.run(run_load(HOST, port, request, CONCURRENCY, calls)).seconds
        admin.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"r": 1.0}})
    return rollouts * calls / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("--calls", type=int, default=160)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-bench-"))
    engine_port = free_port()
    engine = start(
        [sys.executable, "-m", "tests.fake_engine", "--port", str(engine_port)], engine_port, workdir / "engine.log"
    )
    dead = f"http://{HOST}:{free_port()}/v1/traces"  # nothing listens there: the collector is down
    gateways = {
        "off": serve(engine.url, free_port(), workdir, "off", None),
        "collector_down": serve(engine.url, free_port(), workdir, "down", dead),
    }
    rates: dict[str, list[float]] = {mode: [] for mode in gateways}
    try:
        for gateway in gateways.values():  # warm-up
            one_round(int(gateway.url.rsplit(":", 1)[1]), 2, args.calls)
        for _ in range(args.rounds):
            for mode, gateway in gateways.items():
                rates[mode].append(one_round(int(gateway.url.rsplit(":", 1)[1]), args.rollouts, args.calls))
    finally:
        for gateway in gateways.values():
            gateway.stop()
        engine.stop()
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    ratio = medians["collector_down"] / medians["off"]
    report = {
        "benchmark": "trace_export",
        "concurrency": CONCURRENCY,
        "rollouts_per_round": args.rollouts,
        "calls_per_rollout": args.calls,
        "calls_per_s": rates,
        "median_calls_per_s": medians,
        "collector_down_over_off": round(ratio, 4),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for mode, values in rates.items():
        print(f"{mode:>15}: median {medians[mode]:.0f} calls/s over {len(values)} rounds {[round(v) for v in values]}")
    print(f"collector down / export off: {ratio:.3f}  (written to {args.out})")


if __name__ == "__main__":
    main()
