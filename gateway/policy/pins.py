"""Rollouts pinned to a policy version (evaluation, live promotion): what a pin names, and loading its
version on demand.

``POST /api/rollouts {"policy": PIN}`` pins a rollout (``store.policies.parse_pin``: ``base``,
``latest``, ``pi@latest``, ``opencode@v3``, ``pi-v2``): every call it makes is served by that version of
that policy whatever model name the agent sends, so an agent cannot move its own evaluation to another
policy. Only the control plane (the admin key) creates rollouts, so only it chooses a pin; the rollout
token opens the model endpoints and nothing else. A pin without a policy names the run's own.

``latest`` is resolved once, when the rollout is created: a publication during the rollout does not
move it. A published version the engine does not hold (retired by ``max_staleness``, unloaded to make
room, or lost) is loaded from the path the store keeps for it, under its usual name, and marked loaded;
it is loaded again the same way if a later publication retires it while pinned rollouts still use it.
"""

from __future__ import annotations

from gateway.engine.client import EngineClient
from gateway.errors import InvalidRequest, NotFound
from gateway.policy.adapters import make_room
from gateway.policy.policy_set import PolicySet
from gateway.policy.registry import MAX_VERSION, PolicyRegistry
from store.passk import policy_label
from store.policies import LATEST, InvalidPolicyName, Pin, parse_pin
from store.store import Store


def read_pin(pin: str) -> Pin:
    """The pin's policy and version; InvalidRequest (400) naming the grammar for anything else."""
    try:
        parsed = parse_pin(pin)
    except InvalidPolicyName as exc:
        raise InvalidRequest(str(exc), param="policy") from None
    if parsed.version > MAX_VERSION:
        raise InvalidRequest(
            f"policy {pin!r} is out of range: versions are integers from 1 to {MAX_VERSION}", param="policy"
        )
    return parsed


def requested_version(pin: Pin, policy: PolicyRegistry) -> int:
    """The version a pin names of ``policy`` (``latest``: its current one, now)."""
    return policy.current_version if pin.version == LATEST else pin.version


async def load_version(
    engine: EngineClient, policies: PolicySet, policy: PolicyRegistry, store: Store, version: int
) -> str:
    """The engine's name for a version of ``policy``, loading a published one it does not hold.

    NotFound when no adapter of that version was ever published. Call it under the gateway's
    publication lock: it changes the loaded set the way a publication does.
    """
    held = policy.pinned("", version)
    if held is not None:
        return held.engine_model
    adapter = await store.adapters.get(policy.name, version)
    if adapter is None:
        published = sorted(policy.loaded())
        raise NotFound(
            f"{policy_label(version, policy.name)} was never published to this gateway (policy {policy.name!r} "
            f"holds {', '.join(policy_label(v, policy.name) for v in published)}); pin base, latest or a "
            f"published version",
            param="policy",
        )
    served = {model["id"] for model in await engine.models()}
    if adapter.name not in served:
        await make_room(engine, policies, store, adapter.name)
        await engine.load_adapter(adapter.name, adapter.path)
    await store.adapters.save(policy.name, version, adapter.name, adapter.path, loaded=True)
    policy.load(version, adapter.name, adapter.digest)
    return adapter.name
