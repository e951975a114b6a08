"""Which engine model serves one policy's calls: its current version, or the version a rollout keeps.

One registry per policy (``store.policies``); ``gateway.policy.policy_set`` holds them all.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from store.policies import DEFAULT_POLICY

PINNED_ROLLOUTS = 100_000  # rollouts whose starting version is remembered
MAX_VERSION = 2**31 - 1  # the store keeps versions in 32-bit integer columns (calls, adapters)


@dataclass(frozen=True)
class ResolvedModel:
    public_name: str  # what the client asked for
    engine_model: str  # vLLM's name: the base model or an adapter <policy>-v{N}
    version: int  # 0 = base model
    adapter_digest: str | None = None  # the adapter's content digest (None: the base, or not known)
    policy: str = DEFAULT_POLICY  # the policy serving the call


class PolicyRegistry:
    """Maps any model name a policy's caller sends to that policy's current adapter, or the base model.

    Agents send odd model names (shortened ids on side calls, provider prefixes), so any name that
    is not a loaded version of this policy is served by its current version rather than refused; a
    name of another policy's adapter is just another odd name (the gateway chose the policy).
    """

    def __init__(self, public_name: str, base_model: str, name: str = DEFAULT_POLICY):
        self.public_name = public_name
        self.base_model = base_model
        self.name = name
        self.current_version = 0
        self._loaded: dict[int, str] = {0: base_model}
        self._digests: dict[int, str] = {}  # version -> its adapter's digest, where the publisher gave one
        self._pinned: OrderedDict[int, int] = OrderedDict()  # rollout id -> version it started with

    def resolve(self, requested: str) -> ResolvedModel:
        for version, name in self._loaded.items():
            if requested == name and version != 0:
                return self._resolved(requested, version)
        return self._resolved(requested, self.current_version)

    def _resolved(self, requested: str, version: int) -> ResolvedModel:
        return ResolvedModel(requested, self._loaded[version], version, self._digests.get(version), self.name)

    def resolve_for(self, rollout_id: int, requested: str) -> ResolvedModel:
        """Like ``resolve``, but a rollout keeps the version it started with while it is loaded."""
        resolved = self.resolve(requested)
        if requested in self._loaded.values() and resolved.version != self.current_version:
            return resolved  # an explicitly named version
        pinned = self._pinned.get(rollout_id)
        if pinned is not None and pinned in self._loaded:
            self._pinned.move_to_end(rollout_id)
            return self._resolved(requested, pinned)
        self._pinned[rollout_id] = resolved.version
        if len(self._pinned) > PINNED_ROLLOUTS:
            self._pinned.popitem(last=False)
        return resolved

    def publish(self, version: int, engine_model: str, digest: str | None = None) -> None:
        """Make a loaded adapter the current policy for new calls."""
        self.load(version, engine_model, digest)
        self.current_version = max(self.current_version, version)

    def load(self, version: int, engine_model: str, digest: str | None = None) -> None:
        """A version loaded for rollouts pinned to it (evaluation); the current policy stays."""
        self._loaded[version] = engine_model
        if digest is not None:
            self._digests[version] = digest

    def pinned(self, requested: str, version: int) -> ResolvedModel | None:
        """The loaded version a pinned rollout is served by, whatever it asked for; None when not loaded."""
        return self._resolved(requested, version) if version in self._loaded else None

    def retire(self, version: int) -> None:
        if version not in (0, self.current_version):
            self._loaded.pop(version, None)
            self._digests.pop(version, None)

    def loaded(self) -> dict[int, str]:
        return dict(self._loaded)

    def digests(self) -> dict[int, str]:
        """Loaded version -> its adapter's digest (versions published without one are absent)."""
        return {v: d for v, d in self._digests.items() if v in self._loaded}
