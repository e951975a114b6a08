"""What a create-rollout request asks of the store besides the rollout's place (run, task, group): the
settings it asks its run for, and the policy version it is pinned to. ``Store.create_rollout`` takes each as
one record; both are part of the request a retry must repeat (``store.rollout_requests``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AskedSettings:
    """The settings a rollout asks its run for: they settle a new run's, and must be an existing run's
    (``store.run_settings``); None leaves the run's as they are (a new run's defaults)."""

    capture: str | None = None  # engine or tito (store.capture_modes)
    sampling: dict[str, float] | None = None  # some of SamplingSettings' fields (temperature, top_p)
    policy: str | None = None  # the policy the run trains and is served (store.policies)


@dataclass(frozen=True)
class PolicyPin:
    """The policy version a rollout is served whatever model its calls name; version None: unpinned (the
    run's policy, its current version)."""

    version: int | None = None
    policy: str | None = None  # the policy of that version; None: the run's
    asked: str | None = None  # the pin as the request wrote it (``base``, ``latest``, ``pi@v3``)


RUN_AS_IS = AskedSettings()
UNPINNED = PolicyPin()

__all__ = ["RUN_AS_IS", "UNPINNED", "AskedSettings", "PolicyPin"]
