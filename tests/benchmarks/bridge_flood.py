"""A sandbox flooding its own bridge vs its neighbour's model calls (issue 32).

Run: `.venv/bin/python tests/benchmarks/bridge_flood.py [--calls N] [--connections C] [--uncapped] [--out FILE]`.

Two bridges (two sandboxes) are served in this process, as the runner serves them, in front of one fake
engine (tests/fake_engine.py, mounted under /r/<token>, in its own process). The neighbour makes
sequential chat calls through its bridge, each on a fresh connection (the harsh case: a new descriptor
on both sides per call). Two phases side by side, in alternating blocks (`--rounds`): an idle
neighbourhood, and one where another process (the flooding agent) holds C slow-body connections to the
other bridge (content-length 1,000,000, 9 bytes sent; each reconnects a second after it is refused or
timed out). This process runs with the issue's 1,024 descriptors (`--fd-limit`), so the caps alone
must hold. The flooder runs at nice 19 (`--flood-nice`): on a real host its sandbox's CPU limit keeps
it off the runner's cores; what is measured is the bridge, not a 2-core machine shared with the
flooding process. Reported: the neighbour's p50/p99 and failures per phase, the p99 ratio, what the
flood got, the flooded bridge's peak load. `--uncapped` runs the bridges without caps or timeouts (the
bridge before issue 32) to show the benchmark sees the problem. Writes JSON to
tests/benchmarks/results/bridge_flood.json and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from harnessrl.server import free_port  # noqa: E402
from sandboxes.bridge import HostBridge  # noqa: E402
from sandboxes.bridge_limits import BridgeLimits
from sandboxes.route import Route  # noqa: E402
from tests.benchmarks.loadgen import post_request  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "bridge_flood.json"
INSIDE = 8000  # the port agents' clients name inside their sandbox
CHAT = {"model": "fake-base", "messages": [{"role": "user", "content": "List the files."}], "max_tokens": 16}
SLOW_HEAD = (
    "POST /r/{token}/v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n"
    "content-type: application/json\r\ncontent-length: 1000000\r\n\r\n"
)
SLOW_BODY_SENT = b'{"model":'  # 9 of the 1,000,000 bytes announced
FLOOD_SETTLE_S = 0.5  # seconds after every flood connection's first attempt before the neighbour measures
REFLOOD_S = 1.0  # seconds a flood connection waits before reconnecting once refused or closed
UNCAPPED = BridgeLimits(  # as the bridge was before issue 32
    max_connections=10**9,
    max_in_flight=10**9,
    header_timeout_s=1e9,
    body_read_timeout_s=1e9,
    body_timeout_s=1e9,
    idle_timeout_s=1e9,
    refusals_per_s=1e9,
)

UPSTREAM = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.fake_engine import FakeEngine, create_fake_engine_app
engine = create_fake_engine_app(FakeEngine(record_requests=False))
app = Starlette(routes=[Mount("/r/{token}", app=engine)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="critical", access_log=False)
"""


# --- the flooding agent (a subprocess: its descriptors are its own, as a sandbox's are) ---


class FloodState:
    def __init__(self) -> None:
        self.outcomes: collections.Counter = collections.Counter()
        self.attempts = self.sent = self.connected = self.peak_connected = 0
        self.stop = asyncio.Event()

    def report(self) -> dict:
        return {"requests_sent": self.sent, "peak_connected": self.peak_connected, "outcomes": dict(self.outcomes)}


async def _flood_one(socket_path: str, token: str, state: FloodState) -> None:
    while not state.stop.is_set():
        state.attempts += 1
        try:
            reader, writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            state.outcomes["connect failed"] += 1
            await asyncio.sleep(REFLOOD_S)
            continue
        state.connected += 1
        state.peak_connected = max(state.peak_connected, state.connected)
        try:
            writer.write(SLOW_HEAD.format(token=token).encode() + SLOW_BODY_SENT)
            await writer.drain()
            state.sent += 1
            reply = await _until_closed_or(reader, state.stop)
            state.outcomes[_status(reply)] += 1
        except OSError:
            state.outcomes["write failed"] += 1
        finally:
            writer.close()
            state.connected -= 1
        await asyncio.sleep(REFLOOD_S)


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    """Until the bridge closes; a close with our unsent body unread is a reset after its reply, on unix
    sockets as on TCP, so keep what arrived (a client reading by Content-Length has its answer)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := await reader.read(65536):
            received += chunk
    return received


async def _until_closed_or(reader: asyncio.StreamReader, stop: asyncio.Event) -> bytes | None:
    """What the bridge sent before it closed, or None while it still holds the connection at the end."""
    reading = asyncio.ensure_future(_read_all(reader))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if reading.done():
        return reading.result()
    reading.cancel()
    return None


def _status(reply: bytes | None) -> str:
    if reply is None:
        return "held at the end"
    return reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/1.1 ") else "closed without a reply"


async def flood(socket_path: str, token: str, connections: int) -> None:
    """Hold slow-body connections until stdin closes; then print what they got (JSON)."""
    state = FloodState()
    floods = [asyncio.ensure_future(_flood_one(socket_path, token, state)) for _ in range(connections)]
    while state.attempts < connections:
        await asyncio.sleep(0.05)
    await asyncio.sleep(FLOOD_SETTLE_S)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes it
    state.stop.set()
    await asyncio.gather(*floods, return_exceptions=True)
    print(json.dumps(state.report()), flush=True)


# --- the neighbour and the measurement (this process: the runner's place) ---


async def neighbour_call(socket_path: str, request: bytes) -> tuple[int, float]:
    """One chat call on a fresh connection: (status, milliseconds); status 0 when no reply came."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_unix_connection(socket_path)
    except OSError:
        return 0, (time.perf_counter() - started) * 1000
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        return int(head.split(b" ", 2)[1]), (time.perf_counter() - started) * 1000
    except (OSError, asyncio.IncompleteReadError, IndexError, TimeoutError):
        return 0, (time.perf_counter() - started) * 1000
    finally:
        writer.close()


async def neighbour_calls(socket_path: str, calls: int) -> list[tuple[int, float]]:
    request = post_request("127.0.0.1", INSIDE, "/r/theirs/v1/chat/completions", CHAT, {"connection": "close"})
    return [await neighbour_call(socket_path, request) for _ in range(calls)]


def summary(results: list[tuple[int, float]]) -> dict:
    latencies = sorted(ms for status, ms in results if status == 200)
    statuses = collections.Counter(str(status) for status, _ in results)

    def pct(q: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None

    return {"calls": len(results), "statuses": dict(statuses), "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


async def watch_load(bridge: HostBridge, peak: dict, stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak["connections"] = max(peak["connections"], bridge.load.connections)
        peak["in_flight"] = max(peak["in_flight"], bridge.load.in_flight)
        await asyncio.sleep(0.05)


async def flooded_block(flooder_cmd: list[str], neighbour: HostBridge, calls: int) -> tuple[list, dict]:
    """The neighbour's calls while a flooder process holds its connections; (results, what the flood got)."""
    flooder = await asyncio.create_subprocess_exec(
        *flooder_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert (await asyncio.wait_for(flooder.stdout.readline(), 120)).strip() == b"ready"
        results = await neighbour_calls(neighbour.socket_path, calls)
    finally:
        flooder.stdin.close()
        report = await asyncio.wait_for(flooder.stdout.readline(), 120)
        await flooder.wait()
    return results, json.loads(report or b"{}")


async def rounds(args, neighbour: HostBridge, flooded: HostBridge) -> dict:
    """Idle and flooded blocks alternate, so the machine's other load falls on both alike."""
    flooder_cmd = [sys.executable, __file__, "--flood", flooded.socket_path, "--connections", str(args.connections)]
    flooder_cmd += ["--flood-nice", str(args.flood_nice)]
    idle, flooding, outcomes, sent, held = [], [], collections.Counter(), 0, 0
    peak, stop = {"connections": 0, "in_flight": 0}, asyncio.Event()
    watcher = asyncio.ensure_future(watch_load(flooded, peak, stop))
    try:
        for _ in range(args.rounds):
            idle += await neighbour_calls(neighbour.socket_path, args.calls // args.rounds)
            results, report = await flooded_block(flooder_cmd, neighbour, args.calls // args.rounds)
            flooding += results
            outcomes.update(report.get("outcomes", {}))
            sent += report.get("requests_sent", 0)
            held = max(held, report.get("peak_connected", 0))
    finally:
        stop.set()
        await watcher
    flood = {"requests_sent": sent, "peak_connected": held, "outcomes": dict(outcomes), "flooded_bridge_peak": peak}
    return {"idle": summary(idle), "flooded": {**summary(flooding), "flood": flood}}


async def measure(args, engine_port: int, socket_dir: Path) -> dict:
    limits = UNCAPPED if args.uncapped else BridgeLimits()
    bridges = {}
    for token in ("theirs", "flooder"):
        route = Route.for_gateway(f"http://127.0.0.1:{engine_port}/r/{token}/v1", port_inside=INSIDE)
        bridges[token] = await HostBridge(str(socket_dir / f"{token}.sock"), route, limits).start()
    try:
        await neighbour_calls(bridges["theirs"].socket_path, 20)  # warm-up
        phases = await rounds(args, bridges["theirs"], bridges["flooder"])
    finally:
        for bridge in bridges.values():
            await bridge.close()
    idle, flooding = phases["idle"], phases["flooded"]
    ratio = flooding["p99_ms"] / idle["p99_ms"] if flooding["p99_ms"] and idle["p99_ms"] else None
    return {
        "benchmark": "bridge_flood",
        "limits": "uncapped" if args.uncapped else vars(limits),
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "flood_connections": args.connections,
        "flood_nice": args.flood_nice,
        "rounds": args.rounds,
        **phases,
        "p99_ratio": round(ratio, 2) if ratio else None,
        "neighbour_all_200": set(flooding["statuses"]) == {"200"},
    }


@contextlib.contextmanager
def fake_engine(port: int):
    engine = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(port)], cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            if time.monotonic() > deadline or engine.poll() is not None:
                raise RuntimeError("the fake engine did not start")
            time.sleep(0.1)
        yield
    finally:
        engine.terminate()
        engine.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=900, help="neighbour calls per phase, over all rounds")
    parser.add_argument("--rounds", type=int, default=3, help="idle and flooded blocks, alternating")
    parser.add_argument("--connections", type=int, default=600, help="the flood's slow-body connections")
    parser.add_argument("--fd-limit", type=int, default=1024, help="this process's soft RLIMIT_NOFILE (the issue's)")
    parser.add_argument("--uncapped", action="store_true", help="bridges without caps or timeouts")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--flood-nice",
        type=int,
        default=19,
        help="the flooding process's niceness: its sandbox's CPU limit keeps it off the runner's cores on a "
        "real host; 0 lets its own CPU bursts compete with everything on a small machine",
    )
    parser.add_argument("--flood", help=argparse.SUPPRESS)  # internal: be the flooding agent on this socket
    args = parser.parse_args()
    if args.flood:
        os.nice(args.flood_nice)
        asyncio.run(flood(args.flood, "flooder", args.connections))
        return
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.fd_limit, hard), hard))
    port = free_port()
    with fake_engine(port), tempfile.TemporaryDirectory(prefix="harnessrl-flood-") as socket_dir:
        report = asyncio.run(measure(args, port, Path(socket_dir)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
