"""Rollouts pinned to a policy (evaluation): what a pin names, and loading its version on demand.

``POST /api/rollouts {"policy": "base" | "latest" | "policy-vN"}`` pins a rollout: every call it makes is
served by that version whatever model name the agent sends, so an agent cannot move its own
evaluation to another policy. Only the control plane (the admin key) creates rollouts, so only it
chooses a pin; the rollout token opens the model endpoints and nothing else.

``latest`` is resolved once, when the rollout is created: a publication during the rollout does not
move it. A published version the engine does not hold (retired by ``max_staleness``, or lost) is
loaded from the path the store keeps for it, under its usual name, and marked loaded; it is loaded
again the same way if a later publication retires it while pinned rollouts still use it.
"""

from __future__ import annotations

from gateway.engine.client import EngineClient
from gateway.errors import InvalidRequest, NotFound
from gateway.policy.registry import MAX_VERSION, PolicyRegistry
from store.passk import policy_label
from store.store import Store

BASE, LATEST, PREFIX = "base", "latest", "policy-v"


def requested_version(pin: str, policy: PolicyRegistry) -> int:
    """The version a pin names (``latest``: the current one, now); InvalidRequest beyond the store's range."""
    if pin == BASE:
        return 0
    if pin == LATEST:
        return policy.current_version
    version = int(pin.removeprefix(PREFIX))
    if not 1 <= version <= MAX_VERSION:
        raise InvalidRequest(
            f"policy {pin!r} is out of range: versions are integers from 1 to {MAX_VERSION}", param="policy"
        )
    return version


async def load_version(engine: EngineClient, policy: PolicyRegistry, store: Store, version: int) -> str:
    """The engine's name for a version, loading a published one the policy does not hold.

    NotFound when no adapter of that version was ever published. Call it under the gateway's
    publication lock: it changes the loaded set the way a publication does.
    """
    held = policy.pinned("", version)
    if held is not None:
        return held.engine_model
    adapter = await store.adapters.get(version)
    if adapter is None:
        published = sorted(policy.loaded())
        raise NotFound(
            f"policy-v{version} was never published to this gateway (loaded versions: "
            f"{', '.join(policy_label(v) for v in published)}); pin base, latest or a published "
            f"version",
            param="policy",
        )
    served = {model["id"] for model in await engine.models()}
    if adapter.name not in served:
        await engine.load_adapter(adapter.name, adapter.path)
    await store.adapters.save(version, adapter.name, adapter.path, loaded=True)
    policy.load(version, adapter.name, adapter.digest)
    return adapter.name
