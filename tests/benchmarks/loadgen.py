"""A lean HTTP/1.1 keep-alive load generator, so the client's own CPU cost stays small.

The gateway, the engine and the client share two cores; httpx would spend more CPU per call than
the gateway does, hiding what is being measured.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    calls: int
    seconds: float
    latencies_ms: tuple[float, ...]

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "calls": self.calls,
            "calls_per_s": round(self.calls_per_s, 1),
            "p50_ms": round(self.percentile(0.5), 3),
            "p99_ms": round(self.percentile(0.99), 3),
            "mean_ms": round(statistics.fmean(self.latencies_ms), 3),
        }


Requests = bytes | Iterator[bytes]  # one request sent again and again, or each call's own (sessions)


def next_request(requests: Requests) -> bytes:
    return requests if isinstance(requests, bytes) else next(requests)


async def _connection(host: str, port: int, requests: Requests, count: int, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for _ in range(count):
            request = next_request(requests)
            started = time.perf_counter()
            writer.write(request)
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"unexpected response: {status!r} {(await reader.read(600))!r}")
            length, chunked = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            if chunked:
                while (size := int((await reader.readline()).strip(), 16)) != 0:
                    await reader.readexactly(size + 2)
                await reader.readline()
            else:
                await reader.readexactly(length)
            latencies.append((time.perf_counter() - started) * 1000.0)
    finally:
        writer.close()


def post_request(host: str, port: int, path: str, body: dict, headers: dict[str, str] | None = None) -> bytes:
    payload = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def run_load(host: str, port: int, requests: Requests, concurrency: int, calls: int) -> LoadResult:
    """``calls`` calls over ``concurrency`` keep-alive connections; ``requests``: the one request, or an
    iterator of them shared by the connections (each call takes the next)."""
    latencies: list[float] = []
    per_connection = max(1, calls // concurrency)
    started = time.perf_counter()
    await asyncio.gather(*[_connection(host, port, requests, per_connection, latencies) for _ in range(concurrency)])
    return LoadResult(concurrency, len(latencies), time.perf_counter() - started, tuple(latencies))
