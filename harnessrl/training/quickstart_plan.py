"""What `harnessrl quickstart` is asked to do (``QuickstartPlan``) and what follows from it alone: the
learner's settings, the engine's context for the agent, the rounds' agent and task order."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from harnesses.builtin_agent import ONE_SHOT, BuiltinHarness, BuiltinSettings
from harnesses.grading.judge import JudgeSettings
from harnesses.harness import Harness
from harnesses.task import Task
from harnessrl.training.curriculum import TaskSampling
from harnessrl.training.warm_start import WarmStart, WarmStartResult, learner_keys
from learner.config import LearnerConfig
from rollouts.run_plan import RolloutResult
from sandboxes import Limits, SandboxSpec
from sandboxes.kinds import KINDS, Kind
from store.capture_modes import CaptureMode
from store.evaluation import PASS_REWARD
from store.policies import DEFAULT_POLICY

# One reply per rollout, short: the arithmetic family is graded on the final answer (`eval --harness oneshot`).
PACKED_ROW_TOKENS = 8192
# GRPO's learning rate from a fresh LoRA (the arithmetic quickstart learns in minutes with it), and after a
# warm start: measured on one SFT adapter of `make demo`, 5e-4 collapsed it (held-out pass@1 0.55 to 0.03,
# answers running on past the command) where 1e-4 raised it (0.50 to 0.65) in one round.
FRESH_LR = 5e-4
WARM_LR = 1e-4
# Past a CLI agent's first prompt, a sample adds its answers (two calls measured in make demo's median) and
# this much for the task, tool output and the turns' framing (pi's samples: 100-400 tokens past the prompt).
ROW_TOKENS_PER_SAMPLE = 256


@dataclass(frozen=True)
class QuickstartPlan:
    run: str
    model_dir: Path
    tasks: list[Task]
    database_url: str
    minutes: float = 15.0  # rollouts stop starting after this; the learner finishes its step
    until_version: int = 0  # and not before the learner has published this version (a step count, not a time)
    max_rounds: int = 0  # GRPO rounds at most, whatever the two above say; 0: no limit
    # GRPO rounds stop once a whole round's train pass@1 (``round_pass_at_1``) reaches this, whatever the
    # three above say: the sanity bar's stop (tests/integration/test_learning.py); 0: off
    until_pass_at_1: float = 0.0
    group_size: int = 4
    concurrency: int = 8
    max_model_len: int = 2048
    agent: BuiltinSettings = ONE_SHOT
    # The GRPO rounds' sampling temperature (the training run's; None: the agent's). Above 1 it keeps a
    # policy that SFT made nearly certain exploring, so its groups still spread; evaluation stays at the agent's.
    train_temperature: float | None = None
    groups_per_step: int = 4  # the learner's batch
    lr: float | None = None  # GRPO's learning rate; None: FRESH_LR, or WARM_LR after a warm start
    backlog_steps: int = 2  # rollouts pause while this many learner steps' worth of groups wait
    learner_overrides: dict = field(default_factory=dict)  # more learner keys, as LearnerConfig.updated takes them
    learner_metrics_port: int = 0  # the learner's Prometheus /metrics on 127.0.0.1; 0 = off
    # a running learner's settings folder (harnessrl.training.learner_folder) to hand the run to; None: its own
    learner_folder: Path | None = None
    admin_key: str | None = None  # the gateway's key; default: $HARNESSRL_ADMIN_KEY or $HARNESSRL_HOME/admin.key
    # Held-out evaluation (harnessrl.evaluation.periodic): the base model first, then every `eval_every` versions
    # and the last one, `eval_k` pinned rollouts per held-out task, into the run "<run>-eval"; 0: off
    eval_every: int = 0
    eval_tasks: list[Task] = field(default_factory=list)
    eval_k: int = 4
    judge: JudgeSettings | None = None  # an LLM judge adding the reward component "judge"
    warm_start: WarmStart | None = None  # warm-up run and SFT before GRPO (the whole run fits `minutes`)
    # The agent: "builtin" runs `agent`; a CLI agent (pi, opencode, ...) runs its real binary in local
    # sandboxes, each model call capped at `call_max_tokens`.
    harness: str = "builtin"
    call_max_tokens: int = 256
    # Where rounds and evaluations run (sandboxes.kinds: local, docker, harbor:<type>), the Kind the config read,
    # and the options of that kind's sandboxes ({} for local: bubblewrap, checked when the first starts).
    sandbox: Kind = KINDS["local"]
    sandbox_options: dict = field(default_factory=dict)
    engine_gpu_memory: float | None = None  # GPUs: vLLM's share of the GPU's memory, the rest the learner's
    # A whole kind of task never trained on, evaluated beside `eval_tasks` into "<run>-unseen-eval".
    unseen_tasks: list[Task] = field(default_factory=list)
    # How the policy's runs (GRPO rounds, evaluations) are captured: engine (vLLM renders the chat) or tito
    # (the gateway renders and splices the sampled ids of turns the agent sends back); None: the gateway's.
    capture: CaptureMode | None = None
    # Which tasks a GRPO round plays: "pass", every train task once (shuffled); "learnable", rounds of
    # ``round_groups`` tasks drawn by their family's chance of a reward spread (harnessrl.training.curriculum).
    task_sampling: TaskSampling = "pass"
    # The policy (store.policies) every run of the quickstart trains, is served and evaluates: its versions
    # are the quickstart's; other policies on the same server are untouched.
    policy: str = DEFAULT_POLICY

    @property
    def round_groups(self) -> int:
        """A learnable round's tasks: the learner's backlog, so each round's groups feed it while the next
        round is drawn from what the last one scored."""
        return self.groups_per_step * self.backlog_steps


def learner_config(
    plan: QuickstartPlan, gateway_url: str, output_dir: Path, warm: WarmStartResult | None = None
) -> LearnerConfig:
    """The learner quickstart starts: its batch, the engine's context as token budget, GRPO's lr."""
    settings = LearnerConfig(
        model_dir=str(plan.model_dir),
        output_dir=str(output_dir),
        poll_interval_s=1.0,
        metrics_port=plan.learner_metrics_port,
        lora={"rank": 16},
        optimizer={"lr": grpo_lr(plan, warm)},
        batch={"token_budget": packed_row_tokens(plan), "groups_per_step": plan.groups_per_step},
        publish={"gateway_url": gateway_url, "weight_sync_steps": 1},
    )
    return settings.updated(**learner_keys(warm)).updated(**plan.learner_overrides)


def grpo_lr(plan: QuickstartPlan, warm: WarmStartResult | None) -> float:
    """The plan's lr, else the measured default for where GRPO starts: a fresh LoRA or an SFT adapter."""
    if plan.lr is not None:
        return plan.lr
    return FRESH_LR if warm is None else WARM_LR


def grpo_until(plan: QuickstartPlan, start: int) -> int:
    """The version rounds go on to past the time budget: the plan's, and at least one GRPO step past
    ``start`` (the version GRPO starts from: a warm start that spent the budget still gets its step)."""
    return max(plan.until_version, start + 1)


def round_pass_at_1(results: list[RolloutResult], played: int) -> float | None:
    """A GRPO round's train pass@1: the share of the ``played`` rollouts it was to play (its tasks x the group
    size) that scored at least ``PASS_REWARD`` (a verifier's "solved"; a failed rollout is no pass); None for a
    round cut short (fewer results: the time budget, a dead learner)."""
    if played == 0 or len(results) < played:
        return None
    return sum(r.reward is not None and r.reward >= PASS_REWARD for r in results) / played


def reached_the_bar(plan: QuickstartPlan, pass_at_1: float | None) -> bool:
    """Does a round's train pass@1 end the GRPO rounds (``until_pass_at_1``)?"""
    return plan.until_pass_at_1 > 0 and pass_at_1 is not None and pass_at_1 >= plan.until_pass_at_1


def agent_context(harness: str, call_max_tokens: int) -> int:
    """The engine context a quickstart of ``harness`` needs: the builtin one-shot's 2,048; a CLI agent's
    first prompt (SmolLM2's tokenizer), two turns of answers and a tool's output, in whole KiB of tokens."""
    if harness == "builtin":
        return 2048
    needed = agent_floor(harness, call_max_tokens) + 1024
    return -(-needed // 1024) * 1024


def agent_floor(harness: str, call_max_tokens: int) -> int:
    """The least context a CLI agent's rollout needs: its first prompt and two answers."""
    from harnesses.agents import AGENTS

    return AGENTS[harness].first_prompt_tokens + 2 * call_max_tokens


class ContextTooShort(ValueError):
    """The model's positions cannot hold what the agent sends; the message names the fix."""


def engine_context(harness: str, call_max_tokens: int, model_max: int, asked: int | None = None) -> int:
    """The engine's context for a quickstart of ``harness`` on a model of ``model_max`` positions: ``asked``
    (--max-model-len) or ``agent_context``, cut to the model's maximum while the agent's first prompt and two
    answers still fit (tool output then has less room: a call past it ends its rollout with the engine's
    error, recorded), else ``ContextTooShort``: vLLM refuses a context past the model's positions."""
    if asked is not None and asked > model_max:
        raise ContextTooShort(
            f"--max-model-len {asked} is past the model's {model_max} positions (config.json "
            f"max_position_embeddings): pass at most {model_max}, or --model with a longer-context model"
        )
    wanted = asked or agent_context(harness, call_max_tokens)
    if wanted <= model_max:
        return wanted
    floor = agent_floor(harness, call_max_tokens)
    if floor > model_max:
        raise ContextTooShort(
            f"{harness}'s first prompt and two answers of --call-max-tokens {call_max_tokens} need {floor} "
            f"tokens; the model has {model_max} positions: pass "
            f"--model with a longer-context model (`harnessrl models prepare --context 16384` writes SmolLM2 "
            f"with its positions stretched)"
        )
    return model_max


def default_model(harness: str, call_max_tokens: int, asked: int | None = None) -> Path:
    """The quickstart's model when none is named: SmolLM2, its positions stretched (``stretch_context``)
    when the agent's first prompt and two answers need more than its 8,192 (Hermes, Claude Code, Codex)."""
    from harnessrl.engine.model_prep import prepare_smollm2, stretch_context
    from harnessrl.engine.process import model_max_len

    base = prepare_smollm2()
    if harness == "builtin" or agent_floor(harness, call_max_tokens) <= model_max_len(base):
        return base
    return stretch_context(base, asked or agent_context(harness, call_max_tokens))


def packed_row_tokens(plan: QuickstartPlan) -> int:
    """The learner's token budget per packed row: at least 8k and the engine's context; for a CLI agent,
    room for its first prompt once and what a step's samples add past it (``ROW_TOKENS_PER_SAMPLE``
    each, and what the agent sends after the task), so a step's samples, which share that prompt, pack
    as one prefix tree forwarding it once (an 8k row held OpenCode's 7.7k-token prompt with one or two
    samples: a step forwarded it per row; Claude Code's 2.3k tokens after the task made a step of 8
    demonstrations two rows, each forwarding the 9.8k tokens before the task)."""
    floor = max(plan.max_model_len, PACKED_ROW_TOKENS)
    if plan.harness == "builtin":
        return floor
    from harnesses.agents import AGENTS
    from learner.sft import SftConfig

    agent = AGENTS[plan.harness]
    samples = max(plan.groups_per_step * plan.group_size, SftConfig.samples_per_step)
    per_sample = 2 * plan.call_max_tokens + ROW_TOKENS_PER_SAMPLE + agent.tokens_after_task
    return max(floor, agent.first_prompt_tokens + samples * per_sample)


def unseen_run(run: str) -> str:
    """The run whose "-eval" holds the evaluations on the unseen kind of task."""
    return f"{run}-unseen"


def sandbox_spec() -> SandboxSpec:
    """Each rollout's sandbox, in rounds and evaluations alike: 1 GiB, one CPU."""
    return SandboxSpec(limits=Limits(memory_bytes=2**30, cpus=1.0))


def round_order(tasks: list[Task], round_: int) -> list[Task]:
    """The round's tasks in an order of its own (seeded by the round): each learner step then sees groups of
    every kind of task, not one kind after another as a sorted family would give it."""
    shuffled = list(tasks)
    random.Random(round_).shuffle(shuffled)
    return shuffled


def create_agent(plan: QuickstartPlan) -> Harness:
    """The rounds' agent: the builtin one, or a real CLI agent set up for the plan's sandboxes."""
    if plan.harness == "builtin":
        return BuiltinHarness(plan.agent)
    from harnesses.agents import AgentSettings, create

    agent = create(plan.harness, sandbox=plan.sandbox, settings=AgentSettings(max_tokens=plan.call_max_tokens))
    if not plan.sandbox.runs_images:  # local sandboxes run the host's install
        agent.host_install()  # AgentNotInstalled, naming the install command, before any engine starts
    return agent
