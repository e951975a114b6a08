"""`harnessrl run` and `harnessrl eval`: rollouts of a harness on tasks, by the policy or a teacher.

Each command is its config and one call: every key of its config (harnessrl/config/jobs.py) is an option
(``harnessrl.cli.job_config.config_command``), over its --config file, and harnessrl/cli/jobs.py runs it."""

from __future__ import annotations

from harnessrl.cli.job_config import config_command
from harnessrl.config.jobs import EvalConfig, RunConfig


@config_command(RunConfig)
def run_rollouts(config: RunConfig) -> None:
    """Run G rollouts of a harness on every task, verify them and record their rewards."""
    from harnessrl.cli.jobs import start_run

    start_run(config)


@config_command(EvalConfig)
def eval_policies(config: EvalConfig) -> None:
    """Evaluate policies on tasks: k rollouts per task per policy, each pinned to its policy; a table,
    eval.json and eval.png (per policy pass@1, pass@k, mean reward with a 95% interval, failures)."""
    from harnessrl.cli.jobs import start_eval

    start_eval(config)
