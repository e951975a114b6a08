"""`make demo`'s recipe with the other agents: `harnessrl quickstart --harness AGENT --tasks builtin:shell
--warm-start --upstream solutions`, once per agent, and what it reached: held-out pass@1 of the base
model, of the SFT adapter and of the last GRPO version; wall time; the learner's step time, rows and
peak resident memory on the agent's long samples; the capture share.

Run: `.venv/bin/python tests/benchmarks/agent_recipes.py [--agents opencode,codex,hermes,claude-code]
[--kinds write,copy,rename] [--minutes 50] [--sft-epochs 2] [--capture tito]`. Each agent runs in a fresh `$HARNESSRL_HOME` under
``--homes`` (its store, logs and adapters stay there); `--read` only reads homes a run left. The
kinds are cut to a few because these agents' first prompts (7.7k-13k tokens of SmolLM2's tokenizer)
make each SFT and GRPO step minutes on 2 CPU cores (docs/benchmarks.md): 3 kinds give 19 train tasks
and 5 held-out ones (x4 rollouts a point). Figures go to ``--out`` (JSON, one object per agent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from gateway.api.protocol import CaptureMode  # noqa: E402
from harnessrl.evaluation.periodic import eval_run_name  # noqa: E402
from harnessrl.settings import default_database_url  # noqa: E402
from harnessrl.training.dashboard import capture_line, step_rows  # noqa: E402
from harnessrl.training.warm_start import warm_up_run  # noqa: E402
from store.passk import policy_results  # noqa: E402
from store.store import Store  # noqa: E402

AGENTS = ("opencode", "codex", "hermes", "claude-code")
DEFAULT_OUT = Path(__file__).parent / "results" / "agent_recipes.json"
BIN = Path(sys.executable).parent / "harnessrl"


def quickstart_command(
    agent: str, kinds: list[str], minutes: float, sft_epochs: int = 2, capture: str = "tito"
) -> list[str]:
    """`make demo`'s settings (SFT 2 epochs at 2e-3, 128-token calls, 1/8 held out, tito capture), on
    ``kinds`` only. ``sft_epochs``: more for fewer kinds, whose demonstrations make fewer SFT steps an
    epoch. ``capture`` engine: how the runs before 2026-12-06 were captured."""
    include = [arg for kind in kinds for arg in ("--include", f"shell-{kind}-*")]
    return [
        str(BIN), "quickstart", "--run", agent, "--harness", agent, "--tasks", "builtin:shell", *include,
        "--minutes", str(minutes), "--warm-start", "--upstream", "solutions", "--sft-epochs", str(sft_epochs),
        "--sft-lr", "2e-3", "--call-max-tokens", "128", "--test-fraction", "0.125", "--eval-every", "1000",
        "--capture", capture,
    ]  # fmt: skip


def run_recipe(agent: str, home: Path, kinds: list[str], minutes: float, sft_epochs: int, capture: str) -> float:
    """The quickstart in its own home; its wall time in minutes (its output in home/quickstart.log)."""
    home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(home / "quickstart.log", "wb") as log:
        done = subprocess.run(
            quickstart_command(agent, kinds, minutes, sft_epochs, capture),
            env={**os.environ, "HARNESSRL_HOME": str(home)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        raise SystemExit(f"{agent}'s quickstart failed ({done.returncode}): see {home / 'quickstart.log'}")
    return (time.monotonic() - started) / 60


async def figures(agent: str, home: Path, run: str | None = None) -> dict:
    """What the agent's quickstart (its run ``run``, default the agent's name) left in its store."""
    run = run or agent
    os.environ["HARNESSRL_HOME"] = str(home)
    store = Store.from_url(default_database_url())
    try:
        evaluated = await store.listings.run_id(eval_run_name(run))
        cells = await store.evaluations.pinned_task_counts(evaluated) if evaluated is not None else []
        steps = [row for row in await step_rows(store, run) if row.get("samples")]
        runs = [run, warm_up_run(run), eval_run_name(run)]
        return {
            "agent": agent,
            "held_out": [
                {"version": r.version, "tasks": r.tasks, "rollouts": r.n, "pass_at_1": r.pass_at_1}
                for r in policy_results(cells)
            ],  # fmt: skip
            "learner_steps": len(steps),
            "step_time_s_median": statistics.median(r["step_time_s"] for r in steps) if steps else None,
            "rows_per_step": [r.get("rows") for r in steps],
            "tokens_per_step": [r.get("tokens") for r in steps],
            "peak_rss_gib": max((r.get("peak_rss_gib") or 0 for r in steps), default=None),
            "capture": await capture_line(store, runs),
            "sft": sft_figures(home / "quickstart" / run / "sft" / "sft.json"),
        }
    finally:
        await store.close()


def sft_figures(path: Path) -> dict | None:
    """The warm start's SFT: samples, steps and the last loss (its sft.json)."""
    if not path.is_file():
        return None
    sft = json.loads(path.read_text())
    return {"samples": sft["samples"], "steps": len(sft["steps"]), "last_loss": sft["steps"][-1]["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--kinds", default="write,copy,rename")
    parser.add_argument("--minutes", type=float, default=50.0)
    parser.add_argument("--sft-epochs", type=int, default=2, help="SFT passes over the demonstrations")
    parser.add_argument("--capture", choices=get_args(CaptureMode), default="tito", help="as make demo: tito")
    parser.add_argument("--homes", type=Path, default=Path("/tmp/harnessrl-agent-recipes"))
    parser.add_argument("--read", action="store_true", help="only read the homes earlier runs left")
    parser.add_argument("--run", help="with --read and one agent: the run's name, if not the agent's")
    parser.add_argument("--wall-minutes", type=float, help="with --read: the run's wall time, measured outside")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    kinds = args.kinds.split(",")
    for agent in args.agents.split(","):
        home = args.homes / agent
        wall = None if args.read else run_recipe(agent, home, kinds, args.minutes, args.sft_epochs, args.capture)
        result = asyncio.run(figures(agent, home, args.run if args.read else None))
        result["wall_minutes"] = wall or args.wall_minutes or results.get(agent, {}).get("wall_minutes")
        if not args.read:
            result["capture_mode"] = args.capture
        results[agent] = result
        print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
