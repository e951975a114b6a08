"""Viewer REST latency on one run of 10,000 rollouts / 200,000 calls in SQLite.

Run: `.venv/bin/python tests/benchmarks/viewer_scale.py [--rebuild] [--requests 20] [--out FILE]`.
Builds (once, cached under --db) a migrated SQLite store with realistic sizes: 2,500 groups of 4,
20 calls per rollout whose prompts grow from a few hundred to a few thousand token ids (each call
extends the last), title side calls, forks, policy versions advancing over the run, learner steps.
Then serves it with the gateway on a loopback socket and times the first page of every listing the
viewer uses (median and p95 of --requests sequential requests after one warm-up). Target: < 300 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, insert

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from gateway.settings import GatewaySettings  # noqa: E402
from harnessrl.server import BackgroundGateway  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from store.arrays import pack_ids, pack_logprobs  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from store.tables import Call, Group, LearnerStep, Rollout, Run, Task, utcnow  # noqa: E402

RUN, ROLLOUTS, CALLS_PER_ROLLOUT, GROUP_SIZE, TASKS, VOCAB = "scale", 10_000, 20, 4, 32, 2000
HARNESSES = ("builtin", "opencode", "pi", "hermes")
DEFAULT_DB = Path("/tmp/harnessrl-viewer-scale/viewer.db")
RESULTS = Path(__file__).parent / "results"
BATCH = 5000
ADMIN_KEY = "bench-admin-key"  # every /api read needs the control plane's key


# --- the fixture -------------------------------------------------------------------------------


def build(path: Path) -> dict:
    """A fresh migrated store holding the run; returns what was written."""
    started = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    upgrade(sqlite_url(path))
    engine = create_engine(f"sqlite:///{path}")
    rng = np.random.default_rng(0)
    with engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA synchronous=OFF")
        conn.execute(
            insert(Run.__table__), [{"id": 1, "name": RUN, "config": {"capture": "engine"}, "created_at": utcnow()}]
        )
        conn.execute(
            insert(Task.__table__),
            [{"id": t + 1, "run_id": 1, "name": f"task-{t}", "spec": {}, "created_at": utcnow()} for t in range(TASKS)],
        )
        groups = ROLLOUTS // GROUP_SIZE
        conn.execute(
            insert(Group.__table__),
            [
                {
                    "id": g + 1,
                    "run_id": 1,
                    "task_id": g % TASKS + 1,
                    "name": f"round-{g // TASKS}",
                    "status": "consumed" if g < groups * 0.8 else "ready" if g < groups * 0.95 else "open",
                    "size": GROUP_SIZE,
                    "ready_at": utcnow() if g < groups * 0.95 else None,
                    "created_at": utcnow(),
                }
                for g in range(groups)
            ],
        )
        conn.execute(insert(Rollout.__table__), [_rollout(n, rng) for n in range(ROLLOUTS)])
        conn.execute(
            insert(LearnerStep.__table__),
            [
                {
                    "run_id": 1,
                    "step": s,
                    "metrics": {
                        "loss": float(rng.normal()),
                        "reward_mean": s / 600,
                        "staleness": int(rng.integers(0, 3)),
                    },
                    "created_at": utcnow(),
                }
                for s in range(1, 601)
            ],
        )
        rows, call_id = [], 0
        for n in range(ROLLOUTS):
            for row in _calls(n, call_id, rng):
                rows.append(row)
                call_id = row["id"]
            if len(rows) >= BATCH:
                conn.execute(insert(Call.__table__), rows)
                rows = []
        if rows:
            conn.execute(insert(Call.__table__), rows)
    engine.dispose()
    return {
        "rollouts": ROLLOUTS,
        "calls": call_id,
        "db_mib": round(path.stat().st_size / 2**20),
        "build_s": round(time.perf_counter() - started, 1),
    }


def _rollout(n: int, rng) -> dict:
    status = "running" if n >= ROLLOUTS - 500 else "failed" if n % 10 == 3 else "finished"
    reward = None if status == "running" else float(rng.random() < 0.2 + 0.6 * n / ROLLOUTS)
    return {
        "id": n + 1,
        "run_id": 1,
        "task_id": (n // GROUP_SIZE) % TASKS + 1,
        "group_id": n // GROUP_SIZE + 1,
        "token": f"hrl-bench-{n}",
        "status": status,
        "reward": reward,
        "rewards": {} if reward is None else {"verifier": reward},
        "error": "timeout after 600 s" if status == "failed" else None,
        "meta": {"harness": HARNESSES[n % len(HARNESSES)]},
        "created_at": utcnow(),
        "finished_at": None if status == "running" else utcnow(),
    }


def _calls(n: int, last_id: int, rng) -> list[dict]:
    """One rollout's calls: a title side call for some, then turns that each extend the previous one."""
    version = n // 160
    context = rng.integers(3, VOCAB, int(rng.integers(300, 800)), dtype=np.int32)
    history = [
        {"role": "system", "content": "You are a coding agent. " * 8},
        {"role": "user", "content": f"Fix the failing test in task {n}. " * 4},
    ]
    rows, parent = [], None
    for k in range(CALLS_PER_ROLLOUT):
        call_id = last_id + k + 1
        if k == 0 and n % 5 == 0:  # title generation, beside the main loop
            rows.append(
                _call_row(
                    call_id,
                    n,
                    version,
                    rng.integers(3, VOCAB, 120, dtype=np.int32),
                    rng.integers(3, VOCAB, 8, dtype=np.int32),
                    ["title"],
                    None,
                    None,
                    0,
                    [{"role": "user", "content": "Generate a short title for this conversation."}],
                    "A title",
                    "stop",
                )
            )
            continue
        output = rng.integers(3, VOCAB, int(rng.integers(10, 80)), dtype=np.int32)
        fork = n % 7 == 0 and k == 10 and parent is not None
        final = k == CALLS_PER_ROLLOUT - 1
        text = f"Running the tests, step {k}. " * 3
        rows.append(
            _call_row(
                call_id,
                n,
                version + (n % 11 == 0 and k >= 10),
                context,
                output,
                [],
                None if fork else parent,
                parent if fork else None,
                5 if fork else 0,
                history,
                text,
                "stop" if final else "length" if k % 9 == 8 else "tool_calls",
            )
        )
        tool = rng.integers(3, VOCAB, int(rng.integers(20, 120)), dtype=np.int32)
        context = np.concatenate([context, output, tool])
        history = history + [
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": f"call_{k}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "pytest -q"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{k}", "content": "1 failed, 3 passed " * 6},
        ]
        parent = call_id
    return rows


def _call_row(call_id, n, version, prompt, output, tags, parent, fork_of, drift, messages, text, finish) -> dict:
    message = {"role": "assistant", "content": text}
    if finish == "tool_calls":
        message["tool_calls"] = [
            {"id": "call_x", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest -q"}'}}
        ]
    logprobs = -np.abs(np.sin(np.arange(len(output), dtype=np.float32)))
    return {
        "id": call_id,
        "rollout_id": n + 1,
        "parent_id": parent,
        "fork_of": fork_of,
        "drift_tokens": drift,
        "dialect": "chat",
        "model": "policy",
        "engine_model": f"policy-v{version}" if version else "base",
        "policy_version": int(version),
        "prompt_ids": pack_ids(prompt),
        "output_ids": pack_ids(output),
        "output_logprobs": pack_logprobs(logprobs),
        "num_prompt_tokens": len(prompt),
        "num_output_tokens": len(output),
        "finish_reason": finish,
        "request": {
            "model": "policy",
            "messages": messages,
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
        },
        "response": {
            "id": f"chatcmpl-{call_id}",
            "object": "chat.completion",
            "model": "base",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(output)},
        },
        "tags": tags,
        "latency_ms": 120.0,
        "created_at": utcnow(),
    }


# --- the measurement ---------------------------------------------------------------------------


def endpoints() -> list[tuple[str, str]]:
    rollout = ROLLOUTS // 2 + 1
    leaf = (rollout - 1) * CALLS_PER_ROLLOUT + CALLS_PER_ROLLOUT  # its last call (ids follow the rollouts)
    return [
        ("runs", "/api/runs?order=desc"),  # as the viewer asks: newest first, with rollout counts
        ("run summary", f"/api/runs/{RUN}/summary"),
        ("learner steps", f"/api/runs/{RUN}/steps"),
        ("groups of run", f"/api/groups?run={RUN}"),
        ("rollouts of run", f"/api/rollouts?run={RUN}"),
        ("rollouts status+reward_min", f"/api/rollouts?run={RUN}&status=finished&reward_min=0.5"),
        ("rollouts harness", f"/api/rollouts?run={RUN}&harness=pi"),
        ("rollouts policy_version", f"/api/rollouts?run={RUN}&policy_version=40"),
        ("rollout calls tokens=false", f"/api/rollouts/{rollout}/calls?tokens=false"),
        ("calls tag", f"/api/calls?run={RUN}&tag=title"),
        ("call decode", f"/api/calls/{leaf}?decode=true"),
        ("conversation", f"/api/rollouts/{rollout}/conversation"),
        ("viewer /ui", "/ui"),
    ]


def measure(url: str, requests: int) -> list[dict]:
    results = []
    with httpx.Client(
        base_url=url,
        timeout=60,
        follow_redirects=True,  # /ui -> /ui/
        headers={"x-admin-key": ADMIN_KEY},
    ) as client:
        for name, path in endpoints():
            client.get(path)  # warm-up: caches, the tokenizer's first load
            times, response = [], None
            for _ in range(requests):
                started = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
            results.append(_result(name, path, response, times))
    return results


def _result(name: str, path: str, response: httpx.Response, times: list[float]) -> dict:
    """Timings, and how many items came back (page data, messages, or decoded pieces)."""
    body = response.json() if "json" in response.headers.get("content-type", "") else {}
    lists = [body[key] for key in ("data", "messages", "prompt_pieces") if isinstance(body.get(key), list)]
    return {
        "endpoint": name,
        "path": path,
        "status": response.status_code,
        "items": len(lists[0]) if lists else None,
        "bytes": len(response.content),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(float(np.percentile(times, 95)), 1),
    }


def tokenizer_dir(db: Path) -> Path:
    from harnessrl.engine.model_prep import build_tiny_model

    folder = db.parent / "tiny-model"
    return folder if (folder / "tokenizer.json").exists() else build_tiny_model(folder)


def markdown(fixture: dict, results: list[dict]) -> str:
    lines = [
        f"# Viewer REST at scale ({fixture['rollouts']:,} rollouts, {fixture['calls']:,} calls, "
        f"SQLite {fixture['db_mib']:,} MiB)",
        "",
        "| endpoint | status | items | p50 ms | p95 ms |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{r['path']}` | {r['status']} | {'' if r['items'] is None else r['items']} | {r['p50_ms']} "
        f"| {r['p95_ms']} |"
        for r in results
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    parser.add_argument("--rebuild", action="store_true", help="build the fixture even if --db exists")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "viewer_scale.json")
    args = parser.parse_args()
    marker = args.db.with_suffix(".json")
    if args.rebuild or not marker.exists():
        fixture = build(args.db)
        marker.write_text(json.dumps(fixture))
    fixture = json.loads(marker.read_text())
    print(f"fixture: {fixture}")
    settings = GatewaySettings(
        database_url=sqlite_url(args.db),
        engine_url="http://127.0.0.1:9",
        admin_key=ADMIN_KEY,
        base_model="bench-base",
        model_dir=str(tokenizer_dir(args.db)),
    )
    with BackgroundGateway(settings) as server:
        results = measure(server.url, args.requests)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "viewer_scale", "fixture": fixture, "results": results}, indent=2))
    args.out.with_suffix(".md").write_text(markdown(fixture, results))
    print(f"{'endpoint':<28} {'status':>6} {'items':>5} {'p50 ms':>8} {'p95 ms':>8}")
    for r in results:
        print(
            f"{r['endpoint']:<28} {r['status']:>6} {'' if r['items'] is None else r['items']:>5} "
            f"{r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f}"
        )
    print(f"written to {args.out} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
