"""The gateway beside the least a Python recording proxy does (tests/benchmarks/bare_proxy.py), on one load.

Run: `.venv/bin/python tests/benchmarks/gateway_floor.py [--calls N] [--runs R] [--concurrency C ...]
[--agent-pace-s S] [--out FILE]`

Both serve the fake engine (tests/fake_engine.py) the peers benchmark's load (tests/benchmarks/peers.py:
284-word bodies, sessions of 32 turns, 32-token answers), one after the other in each row, beside the
engine called directly. The bare proxy parses, forwards, records the ids and log-probs in SQLite before
answering, and nothing else: its CPU per call is the floor any Python gateway on these libraries
stands on, and the difference to harnessrl's is what the gateway's own work (identity, policies,
validation, call graph, limits, metrics, retries, the ASGI boundary) costs. Printed and written (JSON)
per concurrency: calls/s, p50 added over the direct call and CPU ms per call of each.

``--agent-pace-s S``: the engine takes S seconds an answer and each connection is one agent on its own
session, calling again as soon as it is answered (as an agent waits on a real engine): what a call costs
when a session's calls are seconds apart, where the fast load's back-to-back calls share cached reads.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from harnessrl.engine.process import ManagedProcess  # noqa: E402
from tests.benchmarks.loadgen import run_load  # noqa: E402
from tests.benchmarks.peer_servers import (  # noqa: E402
    HOST,
    RECORDING,
    Peer,
    free_port,
    start_engine,
    start_harnessrl,
    wait_for,
)
from tests.benchmarks.peers import measured, row  # noqa: E402
from tests.fake_engine import FakeEngine  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "gateway_floor.json"
CHAT_PATH = "/v1/chat/completions"


def engine_session() -> dict[str, str]:
    """A session of a side that names no policy: the fake engine's own model, on its chat route."""
    return {"path": CHAT_PATH, "auth": "Bearer none", "model": FakeEngine.model}


def start_bare_proxy(workdir: Path, engine_url: str) -> Peer:
    port = free_port()
    process = ManagedProcess(
        [sys.executable, "-m", "tests.benchmarks.bare_proxy", "--port", str(port), "--engine-url", engine_url]
        + ["--database", str(workdir / "bare.db")],
        f"http://{HOST}:{port}",
        workdir / "bare_proxy.log",
    ).start()
    wait_for(f"http://{HOST}:{port}/health", process)
    return Peer("bare_proxy", process, port, engine_session, {})


def paced_row(engine_port: int, sides: dict[str, Peer], concurrency: int, calls: int) -> dict:
    """``row`` at an agent's pace: each of ``concurrency`` connections calls on a session of its own."""
    out = {"concurrency": concurrency, "agent_pace": True}
    for name, side in sides.items():
        sessions = [side.request(False) for _ in range(concurrency)]  # in lockstep: one call each per answer
        summary, _ = measured(side, run_load(HOST, side.port, itertools.cycle(sessions), concurrency, calls))
        out[name] = summary
    direct = Peer("direct", None, engine_port, engine_session, RECORDING)
    out["direct"], _ = measured(None, run_load(HOST, engine_port, direct.request(False), concurrency, calls))
    for name in sides:
        out[name]["added_p50_ms"] = round(out[name]["p50_ms"] - out["direct"]["p50_ms"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="requests per row and side")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--agent-pace-s", type=float, default=0.0, help="seconds the engine takes an answer")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-floor-"))
    engine = start_engine(workdir, args.agent_pace_s)
    sides: dict[str, Peer] = {}
    try:
        sides = {"harnessrl": start_harnessrl(workdir, engine.url), "bare_proxy": start_bare_proxy(workdir, engine.url)}
        engine_port = int(engine.url.rsplit(":", 1)[1])
        one_row = (
            (lambda c: paced_row(engine_port, sides, c, args.calls))
            if args.agent_pace_s
            else (lambda c: row(engine_port, sides, c, False, args.calls))
        )
        rows = [one_row(c) for _ in range(args.runs) for c in args.concurrency]
    finally:
        for side in sides.values():
            side.process.stop()
        engine.stop()
    report = {"benchmark": "gateway_floor", "calls_per_row": args.calls, "agent_pace_s": args.agent_pace_s,
              "cpus": os.cpu_count(),
              "load_average": os.getloadavg(), "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for r in rows:
        cells = [
            f"{name} {r[name]['calls_per_s']:.0f}/s +{r[name]['added_p50_ms']:.3f} ms {r[name]['cpu_ms_per_call']:.3f} cpu ms"
            for name in sides
        ]
        print(f"c={r['concurrency']:<3} direct {r['direct']['calls_per_s']:.0f}/s  " + "  ".join(cells))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
