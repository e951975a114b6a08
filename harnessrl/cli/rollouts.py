"""`harnessrl run` and `harnessrl eval`: rollouts of a harness on tasks, by the policy or a teacher.

Each command is its options and one call: the options (harnessrl/cli/job_options.py) set keys of the
command's config (harnessrl/config/jobs.py) over its --config file, and harnessrl/cli/jobs.py runs it."""

from __future__ import annotations

import typer

from harnessrl.cli.job_config import command_config
from harnessrl.cli.job_options import (
    EVAL,
    EVAL_POLICIES,
    RUN,
    AllowInternet,
    AllowUnisolated,
    Capture,
    Concurrency,
    EvalPolicy,
    EvalRunName,
    EvalTemperature,
    GatewayUrl,
    GroupSize,
    HarnessName,
    K,
    LeaseS,
    MemoryGib,
    Out,
    Policies,
    PolicyModel,
    Rewards,
    RunName,
    RunPolicy,
    RunTemperature,
    SandboxGateway,
    TopP,
    Upstream,
    UpstreamBaseUrl,
    WallFactor,
    WorkerId,
)
from harnessrl.cli.judge_options import NO_JUDGE, JudgeOptions, judge_options
from harnessrl.cli.options import (
    AdminKey,
    ConfigFile,
    DatabaseUrl,
    Exclude,
    Include,
    SandboxOption,
    SandboxOptions,
    ShowConfig,
    Split,
    Tasks,
    TestFraction,
)
from harnessrl.config.jobs import EvalConfig, RunConfig


@judge_options()
def run_rollouts(
    ctx: typer.Context,
    tasks: Tasks = None,
    run: RunName = None,
    harness: HarnessName = RUN.harness,
    policy: RunPolicy = RUN.policy,
    group_size: GroupSize = RUN.group_size,
    concurrency: Concurrency = RUN.concurrency,
    sandbox: SandboxOption = RUN.sandbox.kind,
    sandbox_option: SandboxOptions = None,
    gateway: GatewayUrl = RUN.gateway.url,
    admin_key: AdminKey = None,
    reward: Rewards = None,
    capture: Capture = RUN.capture,
    memory_gib: MemoryGib = RUN.sandbox.memory_gib,
    wall_factor: WallFactor = RUN.sandbox.wall_factor,
    temperature: RunTemperature = RUN.sampling.temperature,
    top_p: TopP = RUN.sampling.top_p,
    allow_unisolated: AllowUnisolated = RUN.sandbox.allow_unisolated,
    judge: JudgeOptions = NO_JUDGE,
    include: Include = None,
    exclude: Exclude = None,
    split: Split = RUN.tasks.split,
    test_fraction: TestFraction = RUN.tasks.test_fraction,
    allow_internet: AllowInternet = RUN.sandbox.allow_internet,
    upstream: Upstream = RUN.teacher.model,
    upstream_base_url: UpstreamBaseUrl = RUN.teacher.base_url,
    policy_model: PolicyModel = RUN.teacher.policy_model,
    database_url: DatabaseUrl = RUN.store.url,
    worker_id: WorkerId = RUN.workers.worker_id,
    lease_s: LeaseS = RUN.workers.lease_s,
    sandbox_gateway: SandboxGateway = RUN.sandbox.gateway,
    config: ConfigFile = None,
    show_config: ShowConfig = False,
) -> None:
    """Run G rollouts of a harness on every task, verify them and record their rewards."""
    from harnessrl.cli.jobs import start_run

    start_run(command_config(RunConfig, ctx, config, show_config))


@judge_options(modes=False)
def eval_policies(
    ctx: typer.Context,
    tasks: Tasks = EVAL.tasks.source,
    policies: Policies = EVAL_POLICIES,
    policy: EvalPolicy = EVAL.policy,
    k: K = EVAL.k,
    harness: HarnessName = EVAL.harness,
    split: Split = EVAL.tasks.split,
    test_fraction: TestFraction = EVAL.tasks.test_fraction,
    include: Include = None,
    exclude: Exclude = None,
    run: EvalRunName = EVAL.run,
    out: Out = EVAL.out,
    concurrency: Concurrency = EVAL.concurrency,
    sandbox: SandboxOption = EVAL.sandbox.kind,
    sandbox_option: SandboxOptions = None,
    temperature: EvalTemperature = EVAL.sampling.temperature,
    memory_gib: MemoryGib = EVAL.sandbox.memory_gib,
    wall_factor: WallFactor = EVAL.sandbox.wall_factor,
    allow_unisolated: AllowUnisolated = EVAL.sandbox.allow_unisolated,
    gateway: GatewayUrl = EVAL.gateway.url,
    admin_key: AdminKey = None,
    judge: JudgeOptions = NO_JUDGE,
    upstream_base_url: UpstreamBaseUrl = EVAL.teacher.base_url,
    policy_model: PolicyModel = EVAL.teacher.policy_model,
    database_url: DatabaseUrl = EVAL.store.url,
    config: ConfigFile = None,
    show_config: ShowConfig = False,
) -> None:
    """Evaluate policies on tasks: k rollouts per task per policy, each pinned to its policy; a table,
    eval.json and eval.png (per policy pass@1, pass@k, mean reward with a 95% interval, failures)."""
    from harnessrl.cli.jobs import start_eval

    start_eval(command_config(EvalConfig, ctx, config, show_config))
