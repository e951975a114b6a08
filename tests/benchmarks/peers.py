"""Peers side by side: harnessrl vs OpenEnv's CaptureServer, rLLM's model gateway and LiteLLM's proxy on one fake engine.

Run: `.venv/bin/python tests/benchmarks/peers.py [--calls N] [--runs R] [--export] [--out FILE]`.

Every proxy sits in front of the same zero-latency fake engine (tests/fake_engine.py) and gets the
same load from the same lean client (tests/benchmarks/loadgen.py): concurrency 1, 16 and 64, streaming
and not, and one session (rollout) of 2,000 turns against sessions of 32 (both sent in loads of 32
calls; each short session's rollout is ended after its load, inside the clock, as an agent's run ends
it). ``--export`` serves harnessrl with ``--otlp-endpoint`` pointed at a local OTLP sink that accepts
and discards every batch: each ended rollout is read back and sent as a trace. Reported per row:
calls/s, added p50/p99 over calling the engine directly, CPU milliseconds per call of the proxy's
process tree, and for streams the added time to the first token. Recording fields
are on for every request (token ids and logprobs asked of the engine).

Each peer runs in its own virtual environment, created by this script from the package index with
pinned versions (kept under ~/.cache/harnessrl/peers): LiteLLM's proxy and OpenEnv's CaptureServer
cannot share one resolved environment with vLLM (docs/platforms.md). The rows of one run alternate
peers on the same cores, so ratios are fair; absolute numbers on a shared 2-core machine are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from tests.benchmarks.loadgen import LoadResult, Requests, next_request, post_request, run_load  # noqa: E402
from tests.benchmarks.peer_servers import (  # noqa: E402  # noqa: E402
    HOST,
    MESSAGES,
    PINS,
    RECORDING,
    Peer,
    start_engine,
    start_peers,
)

DEFAULT_OUT = Path(__file__).parent / "results" / "peers.json"
FIRST_TOKEN = re.compile(rb'"(content|delta)":"[^"]')  # a chunk carrying the first piece of text


# --- streams: time to first token ------------------------------------------------------------------


async def _stream_connection(
    port: int, requests: Requests, count: int, latencies: list[float], ttfts: list[float]
) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        for _ in range(count):
            request = next_request(requests)
            started, first = time.perf_counter(), None
            writer.write(request)
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"unexpected response: {status!r} {await reader.read(500)!r}")
            chunked, length = False, 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                chunked = chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower())
                length = int(value) if name.lower() == b"content-length" else length
            if not chunked:
                await reader.readexactly(length)
                first = first or time.perf_counter()
            else:
                while (size := int((await reader.readline()).strip(), 16)) != 0:
                    data = await reader.readexactly(size + 2)
                    if first is None and FIRST_TOKEN.search(data):
                        first = time.perf_counter()
                await reader.readline()
            now = time.perf_counter()
            latencies.append((now - started) * 1000.0)
            ttfts.append(((first or now) - started) * 1000.0)
    finally:
        writer.close()


async def run_streams(port: int, requests: Requests, concurrency: int, calls: int) -> tuple[LoadResult, list[float]]:
    latencies: list[float] = []
    ttfts: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(
        *[
            _stream_connection(port, requests, max(1, calls // concurrency), latencies, ttfts)
            for _ in range(concurrency)
        ]
    )
    return LoadResult(concurrency, len(latencies), time.perf_counter() - started, tuple(latencies)), ttfts


# --- the rows ------------------------------------------------------------------------------------


def measured(peer: Peer | None, load) -> tuple[dict, list[float] | None]:
    before = peer.cpu_s() if peer else 0.0
    result = asyncio.run(load)
    result, ttfts = result if isinstance(result, tuple) else (result, None)
    summary = result.summary()
    if peer is not None:
        summary["cpu_ms_per_call"] = round((peer.cpu_s() - before) * 1000.0 / result.calls, 3)
    if ttfts:
        summary["ttft_p50_ms"] = round(statistics.median(ttfts), 3)
    return summary, ttfts


def row(direct_port: int, peers: dict[str, Peer], concurrency: int, stream: bool, calls: int) -> dict:
    direct_body = {"model": "fake-base", "messages": MESSAGES, "max_tokens": 64, **RECORDING, "stream": stream}
    direct = post_request(HOST, direct_port, "/v1/chat/completions", direct_body)

    def load(port: int, requests: Requests):
        return (
            run_streams(port, requests, concurrency, calls)
            if stream
            else run_load(HOST, port, requests, concurrency, calls)
        )

    base, _ = measured(None, load(direct_port, direct))
    out = {"concurrency": concurrency, "stream": stream, "direct": base}
    for name, peer in peers.items():
        asyncio.run(run_load(HOST, peer.port, peer.request(stream), min(concurrency, 4), 40))  # warm-up
        summary, _ = measured(peer, load(peer.port, peer.requests(stream, calls)))
        summary["added_p50_ms"] = round(summary["p50_ms"] - base["p50_ms"], 3)
        summary["added_p99_ms"] = round(summary["p99_ms"] - base["p99_ms"], 3)
        if stream:
            summary["added_ttft_p50_ms"] = round(summary["ttft_p50_ms"] - base["ttft_p50_ms"], 3)
        out[name] = summary
    return out


def long_rollout_row(peers: dict[str, Peer], turns: int, short: int, concurrency: int = 16) -> dict:
    """One session of ``turns`` calls against fresh sessions of ``short`` calls each (same total).

    Both are sent the same way, in loads of ``short`` calls (a fresh client each), with every session
    opened before the clock starts: the two rates differ only in how long the session has grown."""
    out = {"turns": turns, "short_turns": short, "concurrency": concurrency}
    for name, peer in peers.items():
        if name == "litellm":
            continue  # no sessions: nothing is kept per rollout
        fresh = [peer.session() for _ in range(turns // short)]
        long = [peer.session()] * (turns // short)
        short_rate, long_rate = (_rate_in_loads(peer, sessions, short, concurrency) for sessions in (fresh, long))
        out[name] = {
            "short_calls_per_s": round(short_rate, 1),
            "long_calls_per_s": round(long_rate, 1),
            "long_vs_short": round(long_rate / short_rate, 3),
        }
    return out


def _rate_in_loads(peer: Peer, sessions: list[dict[str, str]], calls: int, concurrency: int) -> float:
    """Calls per second over one load of ``calls`` calls per session in ``sessions``, one after the other;
    each session ended after its last load (where the peer ends sessions)."""
    started = time.perf_counter()
    for n, session in enumerate(sessions):
        asyncio.run(run_load(HOST, peer.port, peer.request(False, session), concurrency, calls))
        if peer.end is not None and session not in sessions[n + 1 :]:
            peer.end(session)
    return len(sessions) * calls / (time.perf_counter() - started)


class OtlpSink:
    """An OTLP/HTTP collector that accepts every batch and keeps only the count (``--export``)."""

    def __init__(self) -> None:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length") or 0))
                sink.batches += 1
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.batches = 0
        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.endpoint = f"http://{HOST}:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="requests per row and peer")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--export", action="store_true", help="harnessrl exports traces to a local OTLP sink")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    sink = OtlpSink() if args.export else None
    workdir = Path(tempfile.mkdtemp(prefix="harnessrl-peers-"))
    engine = start_engine(workdir)
    engine_port = int(engine.url.rsplit(":", 1)[1])
    peers: dict[str, Peer] = {}
    try:
        peers = start_peers(workdir, engine.url, sink.endpoint if sink else None)
        rows = [
            row(engine_port, peers, c, stream, args.calls)
            for _ in range(args.runs)
            for stream in (False, True)
            for c in (1, 16, 64)
        ]
        long = long_rollout_row(peers, args.turns, 32)
    finally:
        for peer in peers.values():
            if peer.process is not None:
                peer.process.stop()
        engine.stop()
        if sink is not None:
            sink.close()
    report = {
        "benchmark": "peers",
        "pins": PINS,
        "calls_per_row": args.calls,
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "rows": rows,
        "long_rollout": long,
        "export": {"otlp_batches_received": sink.batches} if sink else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print_report(report)
    print(f"written to {args.out}")


def print_report(report: dict) -> None:
    names = ("harnessrl", "capture_server", "rllm_sync", "rllm", "litellm")
    print(f"{'row':<14} {'direct/s':>9} " + " ".join(f"{n + ' /s, +p50, +p99, cpu ms':>38}" for n in names))
    for r in report["rows"]:
        label = f"c={r['concurrency']}{' stream' if r['stream'] else ''}"
        cells = []
        for n in names:
            s = r[n]
            extra = f", ttft+{s['added_ttft_p50_ms']}" if r["stream"] else ""
            cells.append(
                f"{s['calls_per_s']:>7.0f}, +{s['added_p50_ms']:.2f}, +{s['added_p99_ms']:.2f}, "
                f"{s['cpu_ms_per_call']:.2f}{extra}"
            )
        print(f"{label:<14} {r['direct']['calls_per_s']:>9.0f} " + " ".join(f"{c:>38}" for c in cells))
    long = report["long_rollout"]
    for n in names[:-1]:
        s = long[n]
        print(
            f"{n}: {long['turns']} turns in one rollout {s['long_calls_per_s']}/s vs {s['short_calls_per_s']}/s "
            f"in rollouts of {long['short_turns']} ({s['long_vs_short'] * 100:.0f}%)"
        )


if __name__ == "__main__":
    main()
