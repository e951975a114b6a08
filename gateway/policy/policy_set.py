"""Every policy one gateway serves, over its engines' one base model (``store.policies``).

Each policy has its own registry (``gateway.policy.registry``: current version, loaded versions, the
versions running rollouts keep), created when first asked for: a run or live key that names a new
policy starts it, served by the base model until its learner publishes. All of their adapters share
the engines (vLLM multi-LoRA). ``max_adapters`` bounds how many adapters the engines hold at once
(``serve --max-loras``): when a load would pass it, the adapters no call needs, least recently used
first, are unloaded (a policy's current version and the versions running rollouts keep are needed);
when every held adapter is needed the load goes ahead anyway and vLLM's own LRU pages adapters in and
out of its slots (calls wait for a slot, none fails), as ``--max-cpu-loras`` allows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.policy.registry import PolicyRegistry
from store.policies import DEFAULT_POLICY


class PolicySet:
    def __init__(self, public_name: str, base_model: str, max_adapters: int = 0):
        self.public_name = public_name
        self.base_model = base_model
        self.max_adapters = max_adapters  # 0: no bound of the gateway's own
        self._policies: dict[str, PolicyRegistry] = {}
        self._used: dict[str, float] = {}  # engine adapter name -> last call it served (monotonic s)
        self._in_flight: dict[str, int] = {}  # engine adapter name -> calls it serves now
        self.get(DEFAULT_POLICY)

    def get(self, name: str) -> PolicyRegistry:
        """The named policy's registry (a new policy starts on the base model)."""
        registry = self._policies.get(name)
        if registry is None:
            registry = self._policies[name] = PolicyRegistry(self.public_name, self.base_model, name)
        return registry

    @property
    def default(self) -> PolicyRegistry:
        return self._policies[DEFAULT_POLICY]

    def __iter__(self) -> Iterator[PolicyRegistry]:
        return iter(list(self._policies.values()))

    def names(self) -> list[str]:
        return sorted(self._policies)

    def engine_names(self) -> set[str]:
        """Every adapter name the engines should hold (every policy's loaded versions)."""
        return {name for registry in self for version, name in registry.loaded().items() if version != 0}

    @contextmanager
    def serving(self, engine_model: str) -> Iterator[None]:
        """A call served by ``engine_model`` while the block runs: its adapter is needed (never
        unloaded to make room) and counts as used now (least recently used unloading)."""
        if engine_model == self.base_model:
            yield
            return
        self._in_flight[engine_model] = self._in_flight.get(engine_model, 0) + 1
        try:
            yield
        finally:
            self._used[engine_model] = time.monotonic()
            left = self._in_flight[engine_model] - 1
            if left:
                self._in_flight[engine_model] = left
            else:
                del self._in_flight[engine_model]

    def evictable(self, keep: str = "") -> list[tuple[PolicyRegistry, int]]:
        """(policy, version) to unload before one more adapter loads, least recently used first: as
        many as pass ``max_adapters``, never a policy's current version, one a call in flight uses, or
        ``keep`` (the one about to load)."""
        if self.max_adapters <= 0:
            return []
        held = [(r, v, name) for r in self for v, name in r.loaded().items() if v != 0 and name != keep]
        over = len(held) + 1 - self.max_adapters
        if over <= 0:
            return []
        spare = [(r, v, name) for r, v, name in held if v != r.current_version and name not in self._in_flight]
        spare.sort(key=lambda held: self._used.get(held[2], 0.0))
        return [(r, v) for r, v, _ in spare[:over]]

    def forget(self, engine_model: str) -> None:
        self._used.pop(engine_model, None)
