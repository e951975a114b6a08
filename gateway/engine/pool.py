"""Several engines behind one gateway: routing, back-pressure, failover and recovery.

``EnginePool`` is an ``EngineClient`` over N engines (``--engine-url`` repeated, or ``serve --engines N``).
Which engine serves a call is ``gateway.engine.routing``'s choice: a rollout's calls stay on one engine
(its prefix cache), new rollouts go to the least-loaded healthy engine serving their policy version.

- Back-pressure: at most ``max_in_flight`` calls per engine; more wait in its queue (at most
  ``max_queued``, beyond that a 503 ``EngineBusy`` the SDKs retry), and the wait is recorded on the call
  (``calls.queue_ms``) with the engine that served it (``calls.engine``).
- Failover: an engine that fails in transport (``ENGINE_DOWN``) is taken out; the call is sent to
  another, as is every later call of its rollouts (they re-prefill there; the first such call records
  ``calls.moved_from``). A taken-out engine is probed every ``probe_interval_s``; once healthy it gets
  the current adapters loaded again and must pass the capture probe before it serves again.
- Adapters: ``load_adapter`` loads on every healthy engine and returns only then, so a version is on
  every engine before any rollout can be pinned to it; an engine coming back loads the whole set first.

With one engine nothing is taken out (there is nowhere to move to): calls and errors are the engine's.
The rollout a call belongs to comes from ``begin_call`` (the pipeline calls it when it resolves the
call's identity from its token), never from anything the client sends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from contracts.adapter_proof import AdapterProbe
from gateway.engine.client import ENGINE_DOWN, EngineClient, base_model_id
from gateway.engine.proof import prove_engine
from gateway.engine.routing import CallRoute, EngineLoad, Router, StickyLeastLoaded, call_route
from gateway.engine.stream import EngineStream
from gateway.errors import EngineBusy, EngineError, EngineTimeout, EngineUnavailable, GatewayError

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256  # calls per engine at once (vLLM's default max_num_seqs on GPUs)
MAX_QUEUED = 4096  # calls waiting per engine beyond those
PROBE_INTERVAL_S = 1.0  # how often a taken-out engine is looked at
ALREADY_LOADED = "has already been loaded"  # vLLM's answer to loading a name it holds (a shared engine)


@dataclass(eq=False)
class Member:
    """One engine of the pool."""

    index: int
    url: str
    client: EngineClient  # capture-checked and adapter-recovering (``gateway.app``)
    slots: asyncio.Semaphore
    healthy: bool = True
    in_flight: int = 0
    queued: int = 0
    models: set[str] = field(default_factory=set)  # what it serves, as far as the pool knows
    reviving: asyncio.Task | None = None


class EnginePool:
    def __init__(
        self,
        engines: Sequence[tuple[str, EngineClient]],
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_queued: int = MAX_QUEUED,
        probe_interval_s: float = PROBE_INTERVAL_S,
        router: Router | None = None,
    ):
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.members = [
            Member(i, url.rstrip("/"), client, asyncio.Semaphore(max_in_flight))
            for i, (url, client) in enumerate(engines)
        ]
        self.max_in_flight, self.max_queued = max_in_flight, max_queued
        self.probe_interval_s = probe_interval_s
        self.router: Router = router or StickyLeastLoaded()
        self.adapters: dict[str, str] = {}  # engine name -> path: what every engine must hold
        # engine name -> (the learner's probe, its tolerance): what an engine holding it must answer
        # (gateway.engine.proof); an engine back from a failure passes each before it serves again
        self.probes: dict[str, tuple[AdapterProbe, float]] = {}
        self.base_model: str | None = None

    # -- model calls -----------------------------------------------------------------------------

    async def chat(self, body: dict) -> dict:
        return await self._send("chat", body)

    async def completions(self, body: dict) -> dict:
        return await self._send("completions", body)

    async def tokenize(self, body: dict) -> dict:
        return await self._send("tokenize", body)

    async def chat_stream(self, body: dict) -> EngineStream:
        return await self._send("chat_stream", body)

    async def completions_stream(self, body: dict) -> EngineStream:
        return await self._send("completions_stream", body)

    async def _send(self, method: str, body: dict):
        route = call_route.get() or CallRoute(None)
        tried: set[int] = set()
        while True:
            member = self._pick(route, str(body.get("model", "")), frozenset(tried))
            await self._acquire(member, route)
            if not member.healthy and self._failover_possible(tried | {member.index}):
                self._release(member)  # taken out while this call queued for it: go elsewhere now
                tried.add(member.index)
                continue
            try:
                answer = await getattr(member.client, method)(body)
            except ENGINE_DOWN as exc:
                self._release(member)
                self._take_out(member, exc)
                tried.add(member.index)
                if not self._failover_possible(tried):
                    raise
                continue
            except GatewayError:
                self._release(member)
                raise
            except BaseException:
                self._release(member)
                raise
            if method.endswith("_stream"):
                return HeldStream(answer, self, member)
            self._release(member)
            return answer

    def _failover_possible(self, tried: set[int]) -> bool:
        return len(self.members) > 1 and len(tried) < len(self.members)

    def _pick(self, route: CallRoute, model: str, exclude: frozenset[int]) -> Member:
        choice = self.router.route(route.rollout_id, model, Loads(self), exclude)
        if choice is None:  # every engine tried: the last one's error was raised already
            raise EngineUnavailable("no engine of the gateway's pool is reachable")
        member = self.members[choice.index]
        route.engine = member.url
        if choice.moved_from is not None:
            route.moved_from = self.members[choice.moved_from].url
            logger.info("rollout %s moved from %s to %s", route.rollout_id, route.moved_from, member.url)
        return member

    def load_of(self, member: Member) -> EngineLoad:
        return EngineLoad(
            member.index,
            member.healthy,
            member.in_flight,
            member.queued,
            self.router.rollouts_on(member.index),
            member.models,
        )

    # -- back-pressure ---------------------------------------------------------------------------

    async def _acquire(self, member: Member, route: CallRoute) -> None:
        """A slot of ``member``'s in-flight calls, queueing (bounded) when all are taken."""
        if member.in_flight >= self.max_in_flight and member.queued >= self.max_queued:
            raise EngineBusy(
                f"the engine has {member.queued} calls queued behind {member.in_flight} in flight; retry shortly"
            )
        member.queued += 1
        started = time.perf_counter()
        try:
            await member.slots.acquire()
        finally:
            member.queued -= 1
        route.queue_ms += (time.perf_counter() - started) * 1000.0
        member.in_flight += 1

    def _release(self, member: Member) -> None:
        member.in_flight -= 1
        member.slots.release()

    # -- failure and recovery --------------------------------------------------------------------

    def _take_out(self, member: Member, exc: GatewayError) -> None:
        """Stop routing to a failed engine and probe it until it can serve again (one engine: kept)."""
        if len(self.members) == 1:
            return
        if member.healthy:
            logger.warning("engine %s taken out: %s", member.url, exc.message)
        member.healthy = False
        if member.reviving is None or member.reviving.done():
            member.reviving = asyncio.get_running_loop().create_task(self._revive(member))

    async def _revive(self, member: Member) -> None:
        while True:
            await asyncio.sleep(self.probe_interval_s)
            try:
                if await member.client.health():
                    await self._restore(member)
                    member.healthy = True
                    logger.warning("engine %s is back (adapters: %s)", member.url, sorted(self.adapters) or "none")
                    return
            except GatewayError as exc:
                logger.info("engine %s not back yet: %s", member.url, exc.message)

    async def _restore(self, member: Member) -> None:
        """Load every adapter the pool holds onto ``member`` and pass the capture probe, until nothing
        changed meanwhile (a publication during the restore is loaded too)."""
        models = await member.client.models()
        member.models = {m["id"] for m in models}
        base = self.base_model or base_model_id(models)
        while True:
            for name, path in list(self.adapters.items()):
                if name not in member.models:
                    await self._load_on(member, name, path)
            verify = getattr(member.client, "verify", None)
            if verify is not None and base is not None:
                await verify(base)
            for name, (probe, tolerance) in list(self.probes.items()):
                if name in member.models:  # raises AdapterNotApplied: the engine stays out
                    await prove_engine(member.client, member.url, name, probe, tolerance)
            if all(name in member.models for name in self.adapters):
                return

    async def check(self, model: str) -> None:
        """The capture probe on every engine at start; one that fails is taken out (and probed again)."""
        self.base_model = self.base_model or model
        for member in self.members:
            verify = getattr(member.client, "verify", None)
            if verify is None:
                continue
            try:
                await verify(model)
            except (EngineError, EngineUnavailable, EngineTimeout) as exc:
                logger.error("engine %s: %s", member.url, exc.message)
                self._take_out(member, exc)

    # -- adapters and models ---------------------------------------------------------------------

    async def load_adapter(self, name: str, path: str) -> None:
        """Load on every healthy engine; returns once all hold it (a failed engine is taken out and gets
        it when it comes back). Any other failure unloads it everywhere and is raised."""
        self.adapters[name] = path
        targets = [m for m in self.members if m.healthy and name not in m.models]
        results = await asyncio.gather(*(self._load_on(m, name, path) for m in targets), return_exceptions=True)
        errors = []
        for member, result in zip(targets, results, strict=True):
            if isinstance(result, ENGINE_DOWN) and len(self.members) > 1:
                self._take_out(member, result)
            elif isinstance(result, BaseException):
                errors.append(result)
        if errors or not any(m.healthy and name in m.models for m in self.members):
            self.adapters.pop(name, None)
            await self._unload_everywhere(name)
            raise errors[0] if errors else EngineUnavailable(f"no engine could load {name}")

    async def _load_on(self, member: Member, name: str, path: str) -> None:
        try:
            await member.client.load_adapter(name, path)
        except EngineError as exc:
            if ALREADY_LOADED not in exc.message:  # another gateway on the same engine loaded it
                raise
        member.models.add(name)

    def holding(self, name: str) -> list[tuple[str, EngineClient]]:
        """(URL, client) of every healthy engine that holds ``name`` (a publication's probe goes to each)."""
        return [(m.url, m.client) for m in self.members if m.healthy and name in m.models]

    async def unload_adapter(self, name: str) -> None:
        self.adapters.pop(name, None)
        self.probes.pop(name, None)
        targets = [m for m in self.members if m.healthy]
        results = await asyncio.gather(*(m.client.unload_adapter(name) for m in targets), return_exceptions=True)
        for member in self.members:
            member.models.discard(name)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _unload_everywhere(self, name: str) -> None:
        for member in self.members:
            if member.healthy and name in member.models:
                try:
                    await member.client.unload_adapter(name)
                except GatewayError as exc:
                    logger.info("unloading %s from %s: %s", name, member.url, exc.message)
                member.models.discard(name)

    async def models(self) -> list[dict]:
        """What every healthy engine serves (the first one's entries); each engine's own set is noted."""
        asked = [m for m in self.members if m.healthy] or self.members
        answers = await asyncio.gather(*(m.client.models() for m in asked), return_exceptions=True)
        served: list[tuple[Member, list[dict]]] = []
        for member, answer in zip(asked, answers, strict=True):
            if isinstance(answer, ENGINE_DOWN) and len(self.members) > 1:
                self._take_out(member, answer)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                member.models = {m["id"] for m in answer}
                served.append((member, answer))
        if not served:
            raise EngineUnavailable("no engine of the gateway's pool is reachable")
        common = set.intersection(*(member.models for member, _ in served))
        first = [m for m in served[0][1] if m["id"] in common]
        self.base_model = self.base_model or base_model_id(first)
        return first

    async def health(self) -> bool:
        """Whether any engine answers its health check."""
        return any(await asyncio.gather(*(m.client.health() for m in self.members)))

    def engines(self) -> list[dict]:
        """Each engine's state (for the control plane; never shown to a rollout token)."""
        return [
            {
                "index": m.index,
                "url": m.url,
                "healthy": m.healthy,
                "in_flight": m.in_flight,
                "queued": m.queued,
                "rollouts": self.router.rollouts_on(m.index),
                "models": sorted(m.models),
            }
            for m in self.members
        ]

    async def close(self, clients: bool = True) -> None:
        """Stop probing; with ``clients``, close the engines' clients too (not those a caller owns)."""
        for member in self.members:
            if member.reviving is not None:
                member.reviving.cancel()
        await asyncio.gather(*(m.reviving for m in self.members if m.reviving), return_exceptions=True)
        if clients:
            await asyncio.gather(*(m.client.close() for m in self.members), return_exceptions=True)


class Loads(Sequence[EngineLoad]):
    """The pool's engines as the router reads them, each built when read: a rollout staying on its
    engine reads one, only a new or moved rollout reads them all."""

    def __init__(self, pool: EnginePool):
        self._pool = pool

    def __len__(self) -> int:
        return len(self._pool.members)

    def __getitem__(self, index):
        return self._pool.load_of(self._pool.members[index])


class HeldStream:
    """An engine stream holding its engine's in-flight slot until it ends or is closed."""

    def __init__(self, stream: EngineStream, pool: EnginePool, member: Member):
        self._stream, self._pool, self._member = stream, pool, member
        self._released = False

    @property
    def done(self) -> bool:
        return self._stream.done

    async def __aiter__(self):
        async for batch in self.batches():
            for chunk in batch:
                yield chunk

    async def batches(self):
        try:
            async for batch in self._stream.batches():
                yield batch
        except ENGINE_DOWN as exc:
            self._pool._take_out(self._member, exc)
            raise
        finally:
            self.close()

    def close(self) -> None:
        self._stream.close()
        if not self._released:
            self._released = True
            self._pool._release(self._member)
