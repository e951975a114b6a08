"""Publishing policy versions: load a new LoRA adapter into the engine, make it current, retire old ones.

Each version loads under a new name (``policy-v{N}``), never in place: vLLM keys its prefix cache by
adapter name, so reusing a name would serve stale KV. Versions older than ``max_staleness + 1``
behind the current one are unloaded; rollouts in flight keep theirs until then.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from gateway.engine.client import EngineClient
from gateway.errors import Conflict, GatewayError
from gateway.policy import PolicyRegistry, adapter_name
from gateway.store.store import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    version: int
    name: str  # the engine's adapter name
    load_s: float  # seconds the engine took to load it
    unloaded: tuple[int, ...]  # versions retired by this publication


async def publish_adapter(engine: EngineClient, policy: PolicyRegistry, store: Store, version: int,
                          path: str, max_staleness: int) -> Published:
    if version <= policy.current_version:
        raise Conflict(f"adapter version {version} is not newer than the current version "
                       f"{policy.current_version}; versions must increase", param="version")
    name = adapter_name(version)
    started = time.perf_counter()
    await engine.load_adapter(name, path)
    load_s = time.perf_counter() - started
    await store.save_adapter(version, name, path, loaded=True)
    policy.publish(version, name)
    unloaded = await retire_old(engine, policy, store, max_staleness)
    return Published(version, name, load_s, unloaded)


async def retire_old(engine: EngineClient, policy: PolicyRegistry, store: Store, max_staleness: int) -> tuple[int, ...]:
    """Unload every version more than ``max_staleness`` behind the current one."""
    oldest_kept = policy.current_version - max_staleness
    retired = []
    for version, name in sorted(policy.loaded().items()):
        if version == 0 or version >= oldest_kept:
            continue
        try:
            await engine.unload_adapter(name)
        except GatewayError as exc:  # already gone from the engine: forget it anyway
            logger.warning("unloading %s: %s", name, exc.message)
        policy.retire(version)
        await _mark_unloaded(store, version, name)
        retired.append(version)
    return tuple(retired)


async def _mark_unloaded(store: Store, version: int, name: str) -> None:
    for adapter in await store.loaded_adapters():
        if adapter.version == version:
            await store.save_adapter(version, name, adapter.path, loaded=False)


async def restore_adapters(engine: EngineClient, policy: PolicyRegistry, store: Store) -> None:
    """After a gateway restart: make the store's loaded versions current again, reloading any the
    engine lost (it may have restarted too); versions that cannot be reloaded are marked unloaded."""
    adapters = await store.loaded_adapters()
    served = {m["id"] for m in await engine.models()} if adapters else set()
    for adapter in adapters:
        try:
            if adapter.name not in served:
                await engine.load_adapter(adapter.name, adapter.path)
            policy.publish(adapter.version, adapter.name)
        except GatewayError as exc:
            logger.warning("could not restore %s from %s: %s", adapter.name, adapter.path, exc.message)
            await store.save_adapter(adapter.version, adapter.name, adapter.path, loaded=False)
