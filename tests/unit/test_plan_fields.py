"""No key of a config section is declared again in a plan dataclass (issue 62, "typed once, at load, and passed
down whole"): a plan holds the section it reads, or the value the config made of a key, not a copy of its fields.

What is not converted yet is listed below, each name with why, so the list can only shrink: a plan field that
repeats a key and is not listed fails, and so does a listed name that no longer repeats one."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import harnessrl.config
from harnessrl.config.files import Section
from harnessrl.evaluation.evaluate import EvalPlan
from harnessrl.evaluation.periodic import EvalEvery
from harnessrl.training.quickstart_plan import QuickstartPlan
from rollouts.checks import CheckSettings
from rollouts.run_plan import RunPlan

PLANS = (RunPlan, EvalPlan, EvalEvery, CheckSettings, QuickstartPlan)

# Made from the key when the config is read or the plan is built, not copied: the plan holds the loaded or typed
# value under the key's name (the Task list of [tasks], the Harness of `harness`, the Kind of `sandbox.kind`, the
# Judge of [judge], the reward functions of `rewards`, the sampling request of [sampling]).
MADE = {
    "RunPlan": {"tasks", "harness", "rewards", "sandbox", "judge", "sampling"},
    "EvalPlan": {"tasks", "harness", "sandbox", "judge", "sampling"},
    "EvalEvery": {"tasks", "harness", "sandbox"},
    "CheckSettings": {"sandbox"},  # the Kind `tasks check --sandbox` names
    # the WarmStart of [warm_start] and [teacher], the admin key resolved (its env var or key file, created), the
    # engine's context chosen for the model and the agent (engine.max_model_len only asks)
    "QuickstartPlan": {"tasks", "unseen_tasks", "judge", "sandbox", "warm_start", "admin_key", "max_model_len"},
}
# Copies left to convert. RunPlan lives in rollouts/, which harnessrl/ builds on: it cannot hold harnessrl.config's
# sections without the sections moving below it (rollouts/ or a shared package); it is also built field by field
# by harnessrl/training/quickstart.py (out of this change's bounds) and by a dozen tests. EvalPlan and EvalEvery
# are built from the learner's settings and the quickstart's plan as well as from EvalConfig, whose sandbox
# limits a SandboxConfig does not express (an unlimited SandboxSpec). QuickstartPlan
# (harnessrl/training/quickstart_plan.py) still copies QuickstartConfig's top-level keys (typed: `capture` a
# CaptureMode, `policy` resolved to the harness's name when none is given), which have no section to hold, and
# `lr` of [learner], whose other keys it holds resolved (learner_metrics_port: a free port when none is given);
# it is also built field by field by a dozen tests.
COPIED = {
    "RunPlan": {"run", "group_size", "concurrency", "capture", "policy", "teacher", "wall_factor", "lease_s"},
    "EvalPlan": {"run", "policies", "k", "concurrency", "capture", "policy", "policy_model", "wall_factor"},
    "EvalEvery": {"every", "k", "concurrency", "capture", "policy", "temperature"},
    "CheckSettings": {"concurrency", "limits"},
    "QuickstartPlan": {
        "run",
        "harness",
        "group_size",
        "concurrency",
        "capture",
        "policy",
        "minutes",
        "until_version",
        "call_max_tokens",
        "train_temperature",
        "task_sampling",
        "lr",
    },
}


def config_names() -> set[str]:
    """Every key and section name of every config section (harnessrl/config/)."""
    for module in pkgutil.iter_modules(harnessrl.config.__path__):
        importlib.import_module(f"harnessrl.config.{module.name}")
    sections, found = [Section], set()
    while sections:
        section = sections.pop()
        sections.extend(section.__subclasses__())
        if section.__module__.startswith("harnessrl.config"):
            found.update(section.model_fields)
    return found


def test_no_plan_declares_a_config_key_again_but_those_listed():
    names = config_names()
    repeated = {plan.__name__: {f.name for f in dataclasses.fields(plan)} & names for plan in PLANS}
    allowed = {plan: MADE.get(plan, set()) | COPIED.get(plan, set()) for plan in repeated}
    unlisted = {plan: sorted(found - allowed[plan]) for plan, found in repeated.items() if found - allowed[plan]}
    stale = {plan: sorted(allowed[plan] - found) for plan, found in repeated.items() if allowed[plan] - found}
    assert unlisted == {}, "a plan repeats a config key: hold the section (or the value made of it) instead"
    assert stale == {}, "no longer repeated: take it off the list"
