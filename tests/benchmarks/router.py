"""The engine router: 1 vs 2 vs 4 fake engines behind one gateway, against the same engines called directly.

Run: `.venv/bin/python tests/benchmarks/router.py [--latency-ms 20] [--slots 2] [--gateway-in-flight K] [--calls N] [--out FILE]`.

Each fake engine answers a chat call in a fixed ``--latency-ms`` and serves at most ``--slots`` calls at
once (more wait inside it: an engine's capacity), so one engine tops out at slots / latency calls/s.
The gateway (``harnessrl serve --engine-url ...`` repeated, ``--engine-max-in-flight`` 2 x slots) routes
each of 64 rollouts to one engine; every connection of the load is its own rollout. The baseline
("direct") sends the same load straight to the engines, connections spread round-robin over them: a
perfect router with nothing to record. Printed and written (JSON): calls/s at c=1 and c=64 for each
engine count, the scaling from 1 to 2 and 4 engines, and the latency the gateway adds over direct
(p50) at c=1 and c=64. On a shared 2-core machine the absolute numbers are noise; the ratios hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from harnessrl.engine.process import ManagedProcess  # noqa: E402
from harnessrl.server import free_port  # noqa: E402
from tests.benchmarks.loadgen import LoadResult, _connection, post_request  # noqa: E402

HOST = "127.0.0.1"
ADMIN_KEY = "bench-admin-key"
BODY = {
    "model": "policy",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List the files in the repo."},
    ],
    "max_tokens": 16,
}
DIRECT_BODY = {**BODY, "model": "fake-base", "return_token_ids": True, "logprobs": True}
ROLLOUTS = 64
ENGINE_COUNTS = (1, 2, 4)
DEFAULT_OUT = Path(__file__).parent / "results" / "router.json"


def serve_engine(port: int, latency_ms: float, slots: int) -> None:
    """One fake engine: ``latency_ms`` per chat call, at most ``slots`` at once (the rest wait inside)."""
    import uvicorn

    from tests.fake_engine import FakeEngine, create_fake_engine_app

    app = create_fake_engine_app(FakeEngine(record_requests=False, delay_s=latency_ms / 1000.0))
    capacity = asyncio.Semaphore(slots)

    async def bounded(scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            async with capacity:
                return await app(scope, receive, send)
        return await app(scope, receive, send)

    uvicorn.run(bounded, host=HOST, port=port, log_level="warning", access_log=False, loop="uvloop", http="httptools")


async def load(targets: list[tuple[int, bytes]], calls: int) -> LoadResult:
    """``calls`` calls over one keep-alive connection per target (its port and request), all at once."""
    latencies: list[float] = []
    per_connection = max(1, calls // len(targets))
    started = time.perf_counter()
    await asyncio.gather(*[_connection(HOST, port, request, per_connection, latencies) for port, request in targets])
    return LoadResult(len(targets), len(latencies), time.perf_counter() - started, tuple(latencies))


def start(command: list[str], port: int, log: Path) -> ManagedProcess:
    process = ManagedProcess(command, f"http://{HOST}:{port}", log)
    process.start().wait_healthy(60)
    return process


def rollout_requests(gateway_port: int, count: int) -> list[bytes]:
    import httpx

    requests = []
    for i in range(count):
        token = httpx.post(
            f"http://{HOST}:{gateway_port}/api/rollouts",
            json={"run": "bench", "task": f"t{i}"},
            headers={"x-admin-key": ADMIN_KEY},
        ).json()["token"]
        requests.append(post_request(HOST, gateway_port, f"/r/{token}/v1/chat/completions", BODY))
    return requests


def measure(count: int, ports: list[int], in_flight: int, workdir: Path, calls: int) -> dict:
    gateway_port = free_port()
    command = [
        sys.executable,
        "-m",
        "harnessrl.cli",
        "serve",
        "--port",
        str(gateway_port),
        "--admin-key",
        ADMIN_KEY,
        "--database-url",
        f"sqlite+aiosqlite:///{workdir / f'bench-{count}.db'}",
        "--engine-max-in-flight",
        str(in_flight),
    ]
    for port in ports[:count]:
        command += ["--engine-url", f"http://{HOST}:{port}"]
    gateway = start(command, gateway_port, workdir / f"gateway-{count}.log")
    try:
        via = rollout_requests(gateway_port, ROLLOUTS)
        direct = [
            (ports[i % count], post_request(HOST, ports[i % count], "/v1/chat/completions", DIRECT_BODY))
            for i in range(ROLLOUTS)
        ]
        row = {"engines": count}
        for concurrency, n in ((1, calls // 4), (64, calls)):
            asyncio.run(load([(gateway_port, r) for r in via[:concurrency]], min(n, 256)))  # warm-up
            base = asyncio.run(load(direct[:concurrency], n)).summary()
            routed = asyncio.run(load([(gateway_port, r) for r in via[:concurrency]], n)).summary()
            row[f"c{concurrency}"] = {
                "direct": base,
                "gateway": routed,
                "added_p50_ms": round(routed["p50_ms"] - base["p50_ms"], 3),
            }
        return row
    finally:
        gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument(
        "--gateway-in-flight",
        type=int,
        help="the gateway's in-flight bound per engine "
        "[default: 2 x slots, so an engine never idles while the gateway hands a slot on]",
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--serve-engine", type=int, help=argparse.SUPPRESS)  # internal: run one fake engine
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine(args.serve_engine, args.latency_ms, args.slots)
        return
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-router-bench-"))
    ports = [free_port() for _ in range(max(ENGINE_COUNTS))]
    engines = [
        start(
            [
                sys.executable,
                __file__,
                "--serve-engine",
                str(port),
                "--latency-ms",
                str(args.latency_ms),
                "--slots",
                str(args.slots),
            ],
            port,
            workdir / f"engine-{port}.log",
        )
        for port in ports
    ]
    try:
        in_flight = args.gateway_in_flight or 2 * args.slots
        rows = [measure(count, ports, in_flight, workdir, args.calls) for count in ENGINE_COUNTS]
    finally:
        for engine in engines:
            engine.stop()
    one = rows[0]["c64"]["gateway"]["calls_per_s"]
    report = {
        "benchmark": "router",
        "latency_ms": args.latency_ms,
        "slots_per_engine": args.slots,
        "gateway_in_flight_per_engine": args.gateway_in_flight or 2 * args.slots,
        "rollouts": ROLLOUTS,
        "rows": rows,
        "scaling_c64": {str(r["engines"]): round(r["c64"]["gateway"]["calls_per_s"] / one, 2) for r in rows},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"fake engines: {args.latency_ms:g} ms a call, {args.slots} at once each; gateway in flight per engine "
        f"{report['gateway_in_flight_per_engine']}; {ROLLOUTS} rollouts"
    )
    print(
        f"{'engines':>7} {'c=1 calls/s':>12} {'c=64 calls/s':>13} {'x vs 1':>7} {'direct c=64':>12} "
        f"{'added p50 c=1':>14} {'added p50 c=64':>15}"
    )
    for r in rows:
        print(
            f"{r['engines']:>7} {r['c1']['gateway']['calls_per_s']:>12.0f} {r['c64']['gateway']['calls_per_s']:>13.0f} "
            f"{report['scaling_c64'][str(r['engines'])]:>7.2f} {r['c64']['direct']['calls_per_s']:>12.0f} "
            f"{r['c1']['added_p50_ms']:>12.2f}ms {r['c64']['added_p50_ms']:>13.2f}ms"
        )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
