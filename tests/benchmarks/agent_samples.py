"""The learner on each real agent's own samples: how long and how heavy a GRPO step is on the multi-turn
trajectories pi, OpenCode, Hermes, Claude Code and Codex produce (their first prompts run 1.4k to 13k
tokens of SmolLM2's tokenizer).

Run: `.venv/bin/python tests/benchmarks/agent_samples.py [--agents pi,opencode,...] [--tasks 4] [--repeats 2]`.
For each agent: demonstrations of ``--tasks`` builtin:shell train tasks (one per kind) through the
agent's own loop (the solutions teacher answers as the agent's shell tool, a local bubblewrap sandbox,
no engine needed), recorded in SmolLM2's ids; then, in a child process of its own, GRPO steps on that
group of samples as the learner packs it (a prefix tree, LearnerConfig defaults: SmolLM2 float32, LoRA
r16 on every linear layer): median step time and peak resident memory. The demonstrations carry no
sampler log-probs, so each sampled token gets -1.0 (the step costs the same). Absolute times on a
shared 2-core machine are noise; the ratios between agents (tokens per sample vs step time) are the
figure.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere
from contracts.gateway_client import GatewayClient  # noqa: E402
from harnesses.agents import create  # noqa: E402
from harnesses.shell_family import shell_tasks  # noqa: E402
from harnessrl.engine.model_prep import prepare_smollm2  # noqa: E402
from harnessrl.teachers.demonstrations import SOLUTIONS, demonstrator  # noqa: E402
from harnessrl.teachers.teacher import TeacherSettings, teacher_gateway  # noqa: E402
from migrations.runner import upgrade  # noqa: E402
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner  # noqa: E402
from sandboxes.kinds import KINDS  # noqa: E402
from store.database import sqlite_url  # noqa: E402
from store.samples import Sample, build_samples  # noqa: E402
from store.store import Store  # noqa: E402
from tests.benchmarks.trl_grpo import advantages_of, learner_steps  # noqa: E402

AGENTS = ("pi", "opencode", "hermes", "claude-code", "codex")
ADMIN_KEY = "agent-samples-bench"
DEFAULT_OUT = Path(__file__).parent / "results" / "agent_samples.json"


def one_per_kind(count: int) -> list:
    tasks, kinds = [], set()
    for task in shell_tasks():
        kind = task.name.rsplit("-", 1)[0]
        if kind not in kinds:
            kinds.add(kind)
            tasks.append(task)
    return tasks[:count]


async def demonstrations(agent_name: str, tasks: list, model_dir: Path, workdir: Path) -> tuple[list[Sample], int]:
    """The agent's demonstrations of ``tasks``: one sample per rollout path, and how many were rewarded 1."""
    database = sqlite_url(workdir / f"{agent_name}.db")
    upgrade(database)
    agent = create(agent_name, sandbox="local")
    settings = TeacherSettings(model=SOLUTIONS, tokenizer_dir=model_dir, max_model_len=32_768)
    with teacher_gateway(settings, database, ADMIN_KEY, demonstrator(SOLUTIONS, tasks, agent)) as url:
        client = GatewayClient(url, ADMIN_KEY)
        plan = RunPlan(
            run=f"bench-{agent_name}",
            tasks=tasks,
            harness=agent,
            group_size=1,
            concurrency=2,
            sandbox=KINDS["local"],
            sandbox_options={"isolation": "bwrap"},
            capture="engine",
            teacher=SOLUTIONS,
        )
        try:
            results = await Runner(plan, client).run()
        finally:
            await client.close()
    store = Store.from_url(database)
    try:
        samples = [s for r in results for s in build_samples(await store.calls.nodes(r.rollout_id))]
    finally:
        await store.close()
    return [as_sampled(s) for s in samples], sum(r.reward == 1.0 for r in results)


def as_sampled(sample: Sample) -> Sample:
    """A demonstration as if the policy had sampled it (log-prob -1.0 a token, version 0)."""
    mask = sample.loss_mask == 1
    return dataclasses.replace(
        sample,
        old_logprobs=np.where(mask, -1.0, 0.0).astype(np.float32),
        policy_versions=np.where(mask, 0, -1).astype(np.int32),
    )


def child(spec_path: Path) -> None:
    import resource

    spec = pickle.loads(spec_path.read_bytes())
    samples, advantages, budget = spec["samples"], spec["advantages"], spec["budget"]
    result = learner_steps(spec["model"], samples, advantages, budget, True, spec["repeats"], spec["warmup"])
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


def step_in_child(model_dir: Path, samples: list[Sample], repeats: int, warmup: bool) -> dict:
    budget = sum(len(s.input_ids) for s in samples) + 1  # one row: the group's prefix tree
    spec = {"model": str(model_dir), "samples": samples, "advantages": advantages_of([0.0] * len(samples))}
    spec.update(budget=budget, repeats=repeats, warmup=warmup)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.pkl"
        path.write_bytes(pickle.dumps(spec))
        done = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the learner step failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per agent")
    parser.add_argument("--no-warmup", action="store_true", help="time the first step too (long samples)")
    parser.add_argument("--child", type=Path)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    model_dir = prepare_smollm2()
    tasks = one_per_kind(args.tasks)
    rows = []
    with tempfile.TemporaryDirectory(prefix="harnessrl-agents-") as tmp:
        for name in args.agents.split(","):
            samples, rewarded = asyncio.run(demonstrations(name, tasks, model_dir, Path(tmp)))
            lengths = [len(s.input_ids) for s in samples]
            step = step_in_child(model_dir, samples, args.repeats, not args.no_warmup)
            rows.append(
                {
                    "agent": name,
                    "rollouts_rewarded": f"{rewarded}/{len(tasks)}",
                    "samples": len(samples),
                    "tokens_per_sample_median": int(statistics.median(lengths)),
                    "tokens_in_samples": sum(lengths),
                    "tokens_forwarded": step["tokens_forwarded"],
                    "tokens_trained": step["tokens_trained"],
                    "step_s_median": round(statistics.median(step["step_s"]), 2),
                    "peak_rss_mib": step["peak_rss_mib"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "agent_samples", "tasks": len(tasks), "rows": rows}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
