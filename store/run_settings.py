"""A run's settings, settled by its first rollout: the capture mode, the sampling every call of a
training run gets (``gateway.policy.sampling``) and the policy it trains and is served
(``store.policies``). Later rollouts that ask for others are refused."""

from __future__ import annotations

import dataclasses

from store.capture_modes import DEFAULT_CAPTURE
from store.policies import DEFAULT_POLICY
from store.records import SamplingSettings

ADHOC_RUN = "adhoc"  # plain serving: calls without a rollout token; each client's sampling passes through


class RunConflict(ValueError):
    """The run exists with other settings than the ones asked for (``param`` names the setting)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def settled_config(
    run: str, config: dict, capture: str | None, sampling: dict[str, float] | None, policy: str | None = None
) -> dict:
    """The run's config with its capture mode, sampling and policy settled; RunConflict where they differ.

    Every run but the adhoc one (plain serving, no token) samples with fixed settings, the defaults
    unless its first rollout gives them; the adhoc run passes each client's settings through. A run
    settled before policies had names is the default policy's.
    """
    config = dict(config)
    settled_policy = config.get("policy") or (DEFAULT_POLICY if config.get("capture") else None)
    if settled_policy is None:
        config["policy"] = policy or DEFAULT_POLICY
    elif policy is not None and policy != settled_policy:
        raise RunConflict(
            f"run {run!r} trains and is served policy {settled_policy!r}, not {policy!r}: a run keeps its "
            f"policy; start a new run for another",
            "policy",
        )
    if config.get("capture") is None:
        config["capture"] = capture or DEFAULT_CAPTURE
    elif capture is not None and capture != config["capture"]:
        raise RunConflict(f"run {run!r} captures in {config['capture']!r} mode, not {capture!r}", "capture")
    if run == ADHOC_RUN:
        if sampling:
            raise RunConflict(
                f"run {run!r} passes each client's sampling through; it takes no sampling "
                f"settings: give the rollout a run of its own",
                "sampling",
            )
        return config
    fixed = SamplingSettings.from_config(config.get("sampling"))
    asked = dataclasses.replace(fixed or SamplingSettings(), **(sampling or {}))
    if fixed is None:
        config["sampling"] = asked.as_config()
    elif asked != fixed:
        raise RunConflict(
            f"run {run!r} samples with {describe(fixed)}, not {describe(asked)}: a run's "
            f"sampling is fixed when it is created; start a new run to change it",
            "sampling",
        )
    return config


def describe(sampling: SamplingSettings) -> str:
    return f"temperature={sampling.temperature:g}, top_p={sampling.top_p:g}"
