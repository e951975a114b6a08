"""Publishing policy versions: load a new LoRA adapter into the engine, make it current, retire old ones.

Each version loads under a new name (``<policy>-v{N}``), never in place: vLLM keys its prefix cache by
adapter name, so reusing a name would serve stale KV. Versions older than ``max_staleness + 1``
behind their policy's current one are unloaded; rollouts in flight keep theirs until then. Each
policy's publications touch only its own versions; when the engines hold ``max_adapters`` adapters,
the ones no call needs are unloaded first, least recently used (``gateway.policy.policy_set``).

A publication completes in both the store and the engine or changes neither. With several engines
(``gateway.engine.pool``) "the engine" is all of them: the load returns once every healthy engine holds
the adapter, and one that was out gets the whole loaded set before it serves again. An engine that lost
its adapters (it restarted) gets them back: ``RecoveringEngine`` reloads the store's loaded versions
when a call names one the engine no longer has, and retries that call once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from contracts.adapter_proof import AdapterProbe, ProbeResult, adapter_digest
from gateway.engine.client import EngineClient, ModelNotLoaded
from gateway.engine.pool import EnginePool
from gateway.engine.proof import prove_engine
from gateway.errors import Conflict, GatewayError, InvalidRequest
from gateway.policy.policy_set import PolicySet
from gateway.policy.registry import MAX_VERSION, PolicyRegistry
from store.policies import adapter_name
from store.store import Store

logger = logging.getLogger(__name__)

LOST_ADAPTER_RETRIES = 1  # a call that found its adapter gone is sent again once, after the reload


@dataclass(frozen=True)
class Claim:
    """What the publisher says of the adapter (``contracts.adapter_proof``); both optional."""

    digest: str | None = None  # sha256 of its config and weights
    probe: AdapterProbe | None = None  # the learner's log-probs of a probe sequence under it


@dataclass(frozen=True)
class Publication:
    """One version of a policy, as its publisher asks for it to be served."""

    version: int  # the policy's next version (above its current one)
    path: str  # the adapter folder, as the engine reads it
    claim: Claim = Claim()
    tolerance: float = 0.0  # the mean |log-prob difference| (nats per token) the claim's probe may show


@dataclass(frozen=True)
class Published:
    version: int
    name: str  # the engine's adapter name
    load_s: float  # seconds the engine took to load it
    unloaded: tuple[int, ...]  # versions retired by this publication
    digest: str | None = None  # the adapter's content digest (None: neither sent nor readable here)
    proof: tuple[ProbeResult, ...] = ()  # one per engine; empty when no probe was sent


def check_version(version: int, policy: PolicyRegistry) -> None:
    """A version the store can hold and newer than the current one (checked before the engine is touched)."""
    if not 1 <= version <= MAX_VERSION:
        raise InvalidRequest(
            f"adapter version {version} is out of range: versions are integers from 1 to {MAX_VERSION}", param="version"
        )
    if version <= policy.current_version:
        raise Conflict(
            f"adapter version {version} is not newer than policy {policy.name!r}'s current version "
            f"{policy.current_version}; versions must increase",
            param="version",
        )


async def publish_adapter(
    engine: EnginePool,
    policies: PolicySet,
    policy: PolicyRegistry,
    store: Store,
    publication: Publication,
    max_staleness: int,
) -> Published:
    """Load, prove (the claim's probe on every engine, within its tolerance), record, make current."""
    version, path, claim = publication.version, publication.path, publication.claim
    check_version(version, policy)
    digest = await checked_digest(path, claim.digest)
    name = adapter_name(policy.name, version)
    await make_room(engine, policies, store, name)
    started = time.perf_counter()
    try:
        await engine.load_adapter(name, path)
        load_s = time.perf_counter() - started
        proof = await prove(engine, name, claim.probe, publication.tolerance) if claim.probe else ()
        await store.adapters.save(
            policy.name, version, name, path, loaded=True, digest=digest, probe=_json(claim.probe),
            proof=_proof_json(proof),
        )  # fmt: skip
    except Exception:  # not proven or not recorded: the engine must not keep serving it either
        await _unload_quietly(engine, name)  # a load that timed out may still have happened
        raise
    policy.publish(version, name, digest)
    unloaded = await retire_old(engine, policy, store, max_staleness)
    return Published(version, name, load_s, unloaded, digest, proof)


async def make_room(engine: EngineClient, policies: PolicySet, store: Store, loading: str) -> tuple[str, ...]:
    """Unload the adapters no call needs, least recently used first, so one more (``loading``) fits
    in ``max_adapters``; the names unloaded."""
    unloaded = []
    for policy, version in policies.evictable(keep=loading):
        name = policy.loaded()[version]
        await _unload(engine, policy, store, version, name)
        policies.forget(name)
        unloaded.append(name)
    if unloaded:
        logger.info("unloaded %s (least recently used) to load %s", ", ".join(unloaded), loading)
    return tuple(unloaded)


async def checked_digest(path: str, claimed: str | None) -> str | None:
    """The adapter folder's digest when this gateway can read it (refusing a claim that differs: the
    folder changed after the learner wrote it), else the claim."""
    try:
        found = await asyncio.to_thread(adapter_digest, path)
    except OSError:  # the folder is on the engine's disk, not this gateway's
        return claimed
    if claimed is not None and claimed != found:
        raise InvalidRequest(
            f"the adapter folder {path} holds other weights than the learner published (digest "
            f"{found[:12]}, claimed {claimed[:12]}): something rewrote it; publish it again",
            param="digest",
        )
    return found


async def prove(engine: EnginePool, name: str, probe: AdapterProbe, tolerance: float) -> tuple[ProbeResult, ...]:
    """The probe's log-probs on every engine holding ``name``; ``AdapterNotApplied`` when one differs.
    The pool keeps the probe: an engine that comes back after a failure must pass it again."""
    holding = engine.holding(name)
    results = await asyncio.gather(*(prove_engine(client, url, name, probe, tolerance) for url, client in holding))
    for result in results:
        if not result.distinguishable:
            logger.info("%s moves the probe %.3g nats per token: within tolerance of the base", name, result.effect)
    engine.probes[name] = (probe, tolerance)
    return tuple(results)


def _json(probe: AdapterProbe | None) -> dict | None:
    return None if probe is None else probe.as_json()


def _proof_json(proof: tuple[ProbeResult, ...]) -> list[dict] | None:
    return [result.as_json() for result in proof] if proof else None


async def _unload_quietly(engine: EngineClient, name: str) -> None:
    try:
        await engine.unload_adapter(name)
    except GatewayError as exc:
        logger.info("unloading %s after a failed publication: %s", name, exc.message)


async def retire_old(engine: EngineClient, policy: PolicyRegistry, store: Store, max_staleness: int) -> tuple[int, ...]:
    """Unload every version more than ``max_staleness`` behind the current one."""
    oldest_kept = policy.current_version - max_staleness
    retired = []
    for version, name in sorted(policy.loaded().items()):
        if version == 0 or version >= oldest_kept:
            continue
        await _unload(engine, policy, store, version, name)
        retired.append(version)
    return tuple(retired)


async def _unload(engine: EngineClient, policy: PolicyRegistry, store: Store, version: int, name: str) -> None:
    try:
        await engine.unload_adapter(name)
    except GatewayError as exc:  # already gone from the engine: forget it anyway
        logger.warning("unloading %s: %s", name, exc.message)
    policy.retire(version)
    adapter = await store.adapters.get(policy.name, version)
    if adapter is not None:
        await store.adapters.save(policy.name, version, name, adapter.path, loaded=False)


Tolerance = Callable[
    [AdapterProbe], float
]  # the gateway's tolerance for a probe (``gateway.engine.proof.tolerance_for``)


async def restore_adapters(
    engine: EngineClient, policies: PolicySet, store: Store, tolerance: Tolerance | None = None
) -> None:
    """After a gateway restart: make every policy's loaded versions current again, reloading any the
    engine lost (it may have restarted too). Each must still be what was published: its folder's digest
    the stored one, and (given a ``tolerance``) its stored probe passed again on the engine. A version
    that cannot be reloaded or proven is unloaded and marked so: calls never get it."""
    adapters = await store.adapters.loaded()
    served = {m["id"] for m in await engine.models()} if adapters else set()
    for adapter in adapters:
        try:
            await checked_digest(adapter.path, adapter.digest)
            if adapter.name not in served:
                await engine.load_adapter(adapter.name, adapter.path)
            if adapter.probe is not None and tolerance is not None:
                probe = AdapterProbe.from_json(adapter.probe)
                await _prove_restored(engine, adapter.name, probe, tolerance(probe))
            policies.get(adapter.policy).publish(adapter.version, adapter.name, adapter.digest)
        except GatewayError as exc:
            logger.warning("could not restore %s from %s: %s", adapter.name, adapter.path, exc.message)
            await _unload_quietly(engine, adapter.name)
            await store.adapters.save(adapter.policy, adapter.version, adapter.name, adapter.path, loaded=False)


async def _prove_restored(engine: EngineClient, name: str, probe: AdapterProbe, tolerance: float) -> None:
    if isinstance(engine, EnginePool):  # every engine holding it; a recovering one is proven again
        await prove(engine, name, probe, tolerance)
    else:
        await prove_engine(engine, getattr(engine, "base_url", "the engine"), name, probe, tolerance)


class RecoveringEngine:
    """An ``EngineClient`` that gives an engine back the adapters it lost, then retries the call once.

    A call naming an adapter the engine does not serve (a restarted engine has none) reloads every
    version the store holds as loaded, from its stored path, and is sent again once
    (``LOST_ADAPTER_RETRIES``). Concurrent calls that hit the loss share one reload.
    """

    def __init__(
        self,
        engine: EngineClient,
        store: Store,
        policies: Callable[[], PolicySet | None],
        tolerance: Tolerance | None = None,
    ):
        self.engine, self.store, self._policies, self.tolerance = engine, store, policies, tolerance
        self._reload_lock = asyncio.Lock()

    async def chat(self, body: dict) -> dict:
        return await self._recovering(self.engine.chat, body)

    async def completions(self, body: dict) -> dict:
        return await self._recovering(self.engine.completions, body)

    async def chat_stream(self, body: dict):
        return await self._recovering(self.engine.chat_stream, body)  # an EngineStream, once accepted

    async def completions_stream(self, body: dict):
        return await self._recovering(self.engine.completions_stream, body)

    async def tokenize(self, body: dict) -> dict:
        return await self._recovering(self.engine.tokenize, body)

    async def models(self) -> list[dict]:
        return await self.engine.models()

    async def health(self) -> bool:
        return await self.engine.health()

    async def load_adapter(self, name: str, path: str) -> None:
        await self.engine.load_adapter(name, path)

    async def unload_adapter(self, name: str) -> None:
        await self.engine.unload_adapter(name)

    async def close(self) -> None:
        await self.engine.close()

    async def _recovering(self, send: Callable[[dict], Awaitable[dict]], body: dict) -> dict:
        for attempt in range(LOST_ADAPTER_RETRIES + 1):
            try:
                return await send(body)
            except ModelNotLoaded as exc:
                policies = self._policies()
                if attempt == LOST_ADAPTER_RETRIES or policies is None or exc.model not in policies.engine_names():
                    raise
                await self.reload(policies)
        raise AssertionError("unreachable")

    async def reload(self, policies: PolicySet) -> None:
        """Load the store's loaded versions the engine does not list (one reload at a time)."""
        async with self._reload_lock:
            logger.warning("the engine lost adapters (restarted?): reloading the loaded versions")
            await restore_adapters(self.engine, policies, self.store, self.tolerance)
