"""Which SFT warm start makes a real agent's model call its tool? Offline, on recorded demonstrations.

A warm start is what turns pi on SmolLM2 from "never calls a tool" into a policy GRPO can improve, and
each try through `make demo-pi` costs an engine, sandboxes and half an hour. This benchmark reads what
such a run already recorded (``quickstart --warm-start --upstream solutions``: the demonstrations run
and the held-out evaluation runs, whose first calls are exactly the prompts pi sends) and, for each
SFT setting (learning rate, epochs, samples per step), trains a fresh adapter with the learner's own
``learner.sft.train_sft``, then answers every held-out first prompt greedily with transformers. The
answer's ``<tool_call>`` is parsed as the chat template renders one; its command is run as the task's
solution in a bubblewrap sandbox and graded by the task's own verifier (``rollouts.checks``).

It prints and writes per setting: optimizer steps, forwarded and trained tokens, seconds, the last
loss, the share of held-out prompts answered with a well-formed call of the agent's shell tool, and
the share whose command passes (one-call pass@1 at temperature 0: an upper bound on what the first
turn gives the agent; the agent's later turns are not simulated).

Run: ``.venv/bin/python tests/benchmarks/sft_warm_start.py --database sqlite+aiosqlite:///RUN/harnessrl.db
--run demo`` (quickstart's runs are RUN-warmup, RUN-eval and RUN-unseen-eval), ``--settings
'lr=1e-3,epochs=4,samples=8;lr=2e-3,epochs=6,samples=4'``. Beside other work on the cores, run it with
``OMP_NUM_THREADS=1``: with torch's default two threads competing for two busy cores, answering the
20 held-out prompts had not finished after 24 minutes; with one it took 10.

Measured (a `make demo-pi` run's 48 demonstrations, SmolLM2-135M, LoRA r16, next to the busy test suite):
the base model 0/16 tool calls; lr 2e-3, 2 epochs, 8 samples a step (12 steps, loss 1.39 -> 0.006, 31
min of training on that loaded machine): 16/16 bash calls, 14/16 pass; the unseen kind 4/4 calls, 0/4 pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import torch  # noqa: E402

from harnesses.agents.oracle import OracleHarness  # noqa: E402
from harnesses.environments import Environments  # noqa: E402
from harnesses.shell_family import shell_tasks, unseen_shell_tasks  # noqa: E402
from harnesses.task import Task  # noqa: E402
from harnessrl.training.sft import successful_samples  # noqa: E402
from learner.config import LearnerConfig  # noqa: E402
from learner.sft import SftConfig, train_sft  # noqa: E402
from learner.trainer import build_trainer  # noqa: E402
from rollouts.checks import CheckSettings, attempt  # noqa: E402
from sandboxes.kinds import KINDS  # noqa: E402
from store.store import Store  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "sft_warm_start.json"
TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
MAX_NEW_TOKENS = 96


@dataclass(frozen=True)
class Setting:
    lr: float
    epochs: int
    samples: int  # samples per optimizer step

    @classmethod
    def parse(cls, text: str) -> Setting:
        keys = dict(part.split("=") for part in text.split(","))
        return cls(float(keys["lr"]), int(keys["epochs"]), int(keys["samples"]))


@dataclass(frozen=True)
class HeldOut:
    task: Task
    split: str  # "held-out" (new instances) or "unseen" (a kind never trained on)
    prompt_ids: list[int]


async def read_run(database: str, run: str) -> tuple[list, list[HeldOut]]:
    """(demonstration samples, one held-out first prompt per task) from a quickstart run."""
    tasks = {t.name: t for t in shell_tasks() + unseen_shell_tasks()}
    store = Store.from_url(database)
    try:
        samples, _ = await successful_samples(store, f"{run}-warmup", 1.0)
        held: dict[str, HeldOut] = {}
        for split, name in (("held-out", f"{run}-eval"), ("unseen", f"{run}-unseen-eval")):
            after = 0
            while page := await store.listings.run_rollouts(name, after, 500):
                for rollout, _group in page:
                    after = rollout.id
                    _, _, task, _, _ = await store.get_rollout(rollout.id)
                    roots = [c for c in await store.calls.nodes(rollout.id) if c.parent_id is None and not c.tags]
                    if task in tasks and task not in held and roots:
                        held[task] = HeldOut(tasks[task], split, roots[0].prompt_ids.tolist())
        return samples, list(held.values())
    finally:
        await store.close()


def shell_command(text: str, tool: str) -> str | None:
    """The command of the answer's first call of ``tool``; None when it makes none, or a malformed one."""
    match = TOOL_CALL.search(text)
    try:
        call = json.loads(match.group(1)) if match else None
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or call.get("name") != tool or not isinstance(call.get("arguments"), dict):
        return None
    command = call["arguments"].get("command")
    return command if isinstance(command, str) and command.strip() else None


def answers(model, tokenizer, held: list[HeldOut]) -> list[str]:
    """Greedy answers; the prompts' shared prefix (the agent's system prompt and tools) prefilled once."""
    import copy

    model.eval()
    shared = common_prefix([h.prompt_ids for h in held])
    out = []
    with torch.no_grad():
        cache = model(input_ids=torch.tensor([shared]), use_cache=True).past_key_values if shared else None
        for h in held:
            ids = torch.tensor([h.prompt_ids])
            generated = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                past_key_values=copy.deepcopy(cache),
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
            )
            out.append(tokenizer.decode(generated[0, len(h.prompt_ids) :], skip_special_tokens=False))
            print(f"  {h.task.name}: {out[-1][:120]!r}", flush=True)
    return out


def common_prefix(prompts: list[list[int]]) -> list[int]:
    """The tokens every prompt starts with, less the last one (generate needs one uncached token)."""
    if not prompts:
        return []
    n = min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != prompts[0][i] for p in prompts):
            n = i
            break
    return prompts[0][: max(0, n - 1)]


async def passes(held: list[HeldOut], commands: list[str | None]) -> list[bool]:
    settings = CheckSettings(sandbox=KINDS["local"], sandbox_options={"isolation": "bwrap"})
    environments, results = Environments(), []
    for h, command in zip(held, commands, strict=True):
        if command is None:
            results.append(False)
            continue
        tried = await attempt(replace(h.task, solution=command), OracleHarness(), settings, environments)
        results.append(tried.reward == 1.0)
    return results


def score(model, tokenizer, held: list[HeldOut], tool: str) -> dict:
    texts = answers(model, tokenizer, held)
    commands = [shell_command(t, tool) for t in texts]
    passed = asyncio.run(passes(held, commands))
    report = {}
    for split in ("held-out", "unseen"):
        chosen = [i for i, h in enumerate(held) if h.split == split]
        if chosen:
            report[split] = {
                "tasks": len(chosen),
                "tool_call_rate": sum(commands[i] is not None for i in chosen) / len(chosen),
                "pass_rate": sum(passed[i] for i in chosen) / len(chosen),
            }
    report["examples"] = [{"task": h.task.name, "answer": t[:200]} for h, t in list(zip(held, texts))[:4]]
    return report


def measure(model_dir: str, samples: list, held: list[HeldOut], setting: Setting | None, tool: str) -> dict:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lr = setting.lr if setting else 1e-4
    trainer = build_trainer(LearnerConfig(model_dir=model_dir, device="cpu", lora={"rank": 16}, optimizer={"lr": lr}))
    row: dict = {"setting": asdict(setting) if setting else "base"}
    if setting:
        started = time.monotonic()
        config = SftConfig(epochs=setting.epochs, samples_per_step=setting.samples, token_budget=8192)
        result = train_sft(trainer.model, trainer.optimizer, samples, config)
        row |= {
            "steps": len(result.steps),
            "trained_tokens": sum(s.tokens for s in result.steps),
            "first_loss": result.steps[0].loss,
            "last_loss": result.steps[-1].loss,
            "train_seconds": round(time.monotonic() - started, 1),
        }
    return row | score(trainer.model, tokenizer, held, tool)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", required=True, help="the quickstart run's database URL")
    parser.add_argument("--run", default="demo", help="the quickstart run's name")
    parser.add_argument("--model", default=None, help="model folder [default: harnessrl models prepare's SmolLM2]")
    parser.add_argument("--tool", default="bash", help="the agent's shell tool (pi: bash)")
    parser.add_argument("--settings", default="lr=5e-4,epochs=4,samples=8;lr=2e-3,epochs=4,samples=8")
    parser.add_argument("--skip-base", action="store_true", help="do not score the untrained model")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.model is None:
        from harnessrl.engine.model_prep import prepare_smollm2

        args.model = str(prepare_smollm2())
    samples, held = asyncio.run(read_run(args.database, args.run))
    print(f"{len(samples)} demonstration samples; {len(held)} held-out first prompts", flush=True)
    settings = [None] * (not args.skip_base) + [Setting.parse(s) for s in args.settings.split(";") if s]
    rows = []
    for setting in settings:
        rows.append(measure(args.model, samples, held, setting, args.tool))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "examples"}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"demonstrations": len(samples), "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
