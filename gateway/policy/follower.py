"""Gateways on one store follow each other's publications: every policy's version lives in the store.

The learner publishes to one gateway (``POST /admin/adapters``), which loads the adapter into its
engine and records it in the store. Every gateway on the same store looks at the store's loaded
versions every ``follow_interval_s`` (default 0.5 s, so a publish is followed within a second):
a newer version is loaded into its own engine (unless the engine already serves it: gateways may
share one; with several engines, into every one of them before it is made current) and made
current; versions older than ``max_staleness`` behind are retired as the publishing gateway retires
them. A rollout's token works on any of them (the store resolves it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from contracts.adapter_proof import AdapterProbe
from gateway.engine.proof import AdapterNotApplied, tolerance_for
from gateway.errors import GatewayError
from gateway.policy.adapters import make_room, prove, retire_old
from store.records import StoredAdapter

if TYPE_CHECKING:
    from gateway.state import GatewayState

logger = logging.getLogger(__name__)


async def follow_once(state: GatewayState) -> tuple[str, ...]:
    """Load and make current the versions another gateway published, of every policy; their engine names."""
    policies = state.policies
    if policies is None:  # the engine was not discovered yet: nothing is served to follow from
        return ()

    def new_here(policy: str, version: int, name: str) -> bool:
        return version > policies.get(policy).current_version and name not in state.refused_versions

    # The poll reads names and versions only (microseconds on SQLite); the records when one is new.
    if not any(new_here(*loaded) for loaded in await state.store.adapters.loaded_versions()):
        return ()
    adapters = await state.store.adapters.loaded()
    newer = sorted((a for a in adapters if new_here(a.policy, a.version, a.name)), key=lambda a: (a.policy, a.version))
    if not newer:
        return ()
    async with state.publish_lock:  # as a publication: the loaded set changes one change at a time
        served = {model["id"] for model in await state.engine.models()}
        followed = []
        for adapter in newer:
            policy = policies.get(adapter.policy)
            if adapter.version <= policy.current_version:  # published here meanwhile
                continue
            if adapter.name not in served and not await _load_proven(state, adapter):
                continue
            policy.publish(adapter.version, adapter.name, adapter.digest)
            followed.append(adapter)
        for name in sorted({adapter.policy for adapter in followed}):
            await retire_old(state.engine, policies.get(name), state.store, state.settings.max_staleness)
    for adapter in followed:
        logger.info("following the store: now serving %s", adapter.name)
    return tuple(adapter.name for adapter in followed)


async def _load_proven(state: GatewayState, adapter: StoredAdapter) -> bool:
    """Load a version another gateway published into this gateway's engines and prove it with the
    stored probe; False (unloaded, never tried again) when an engine does not apply it."""
    await make_room(state.engine, state.policies, state.store, adapter.name)
    await state.engine.load_adapter(adapter.name, adapter.path)
    if adapter.probe is None:
        return True
    probe = AdapterProbe.from_json(adapter.probe)
    try:
        await prove(state.engine, adapter.name, probe, tolerance_for(state.settings, probe))
    except AdapterNotApplied:  # logged by prove, with the fix
        await state.engine.unload_adapter(adapter.name)
        state.refused_versions.add(adapter.name)  # once unloaded: refused means not held either
        return False
    return True


async def follow(state: GatewayState, interval_s: float) -> None:
    """``follow_once`` every ``interval_s`` until cancelled; a failed look is logged and tried again."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await follow_once(state)
        except (GatewayError, SQLAlchemyError, OSError) as exc:
            logger.warning("following the store's policy: %s", getattr(exc, "message", exc))
