"""The gateway's running parts, created by the app's lifespan and reached through dependencies."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from gateway.decoding import TokenDecoder, tokenizer_folder
from gateway.engine.client import base_model_entry
from gateway.engine.pool import EnginePool
from gateway.engine.proof import tolerance_for
from gateway.errors import EngineUnavailable, GatewayError, InvalidRequest, NotFound
from gateway.policy.adapters import restore_adapters
from gateway.policy.pins import load_version
from gateway.policy.policy_set import PolicySet
from gateway.policy.registry import PolicyRegistry
from gateway.recording.call_books import CallBooks
from gateway.recording.callgraph import CallGraphIndex
from gateway.recording.pipeline import ChatPipeline
from gateway.recording.trace_export import TraceExport
from gateway.request.identity import require_admin
from gateway.request.resent_bodies import ResentBodies
from gateway.request.session_rate import SessionRate
from gateway.request.validated_history import ValidatedHistory
from gateway.settings import GatewaySettings
from gateway.tito.serving import TitoEngine
from gateway.tito.template import ModelText
from store.policies import DEFAULT_POLICY, UnknownPolicy
from store.store import Store
from store.writer import CallWriter


@dataclass
class GatewayState:
    settings: GatewaySettings
    store: Store
    writer: CallWriter
    engine: EnginePool  # every engine the gateway serves from (one or more)
    policies: PolicySet | None = None  # every policy served; None until the engine's base model is known
    max_model_len: int | None = None
    served_hosts: frozenset[str] = field(init=False)  # the Host names this gateway answers to
    session_rate: SessionRate = field(init=False)  # how fast each live key may open sessions
    chat_history: ValidatedHistory = field(default_factory=ValidatedHistory)  # rollouts' validated messages
    resent_bodies: ResentBodies = field(default_factory=ResentBodies)  # rollouts' last chat/messages bodies
    resent_inputs: ResentBodies = field(default_factory=lambda: ResentBodies("input"))  # ... Responses bodies
    model_root: str | None = None  # the engine's model folder, as /v1/models reports it
    _tito: TitoEngine | None = None
    _decoder: TokenDecoder | None = None
    _decoder_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tito_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _discover_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    publish_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    refused_versions: set[str] = field(default_factory=set)  # engine adapter names
    trace_export: TraceExport | None = None  # serve --otlp-endpoint  # published elsewhere, failed the probe here
    # What the gateway keeps across calls (the call graph, metrics, the engine's clock, refusals, retries, token
    # arrays, engine bodies), one record built once: each call's pipeline is handed this one.
    books: CallBooks = field(init=False)

    def __post_init__(self) -> None:
        self.books = CallBooks(CallGraphIndex(self.store.calls.graph_nodes))
        self.served_hosts = self.settings.served_hosts()
        self.session_rate = SessionRate(self.settings.live_sessions_per_minute, self.settings.live_session_burst)

    @property
    def policy(self) -> PolicyRegistry | None:
        """The default policy's registry (None until the engine's base model is known)."""
        return None if self.policies is None else self.policies.default

    async def ensure_policies(self) -> PolicySet:
        """Learn the engine's base model and restore every policy's loaded versions (once); an engine
        that is still down is a 503."""
        if self.policies is not None:
            return self.policies
        async with self._discover_lock:
            if self.policies is None:
                base, self.max_model_len = await self._discover_base_model()
                policies = PolicySet(self.settings.public_model, base, self.settings.max_adapters)
                if self.settings.serves_adapters:
                    await restore_adapters(self.engine, policies, self.store, partial(tolerance_for, self.settings))
                self.policies = policies
        return self.policies

    async def ensure_policy(self, name: str = DEFAULT_POLICY) -> PolicyRegistry:
        """A policy's registry (a new name starts a policy served by the base model)."""
        return (await self.ensure_policies()).get(name)

    async def known_policy(self, name: str) -> PolicyRegistry:
        """A policy this gateway or its store knows, else NotFound naming the known ones (reads never
        start a policy)."""
        policies = await self.ensure_policies()
        if name not in policies.names():
            try:
                await self.store.policies.check_known(name)
            except UnknownPolicy as exc:
                raise NotFound(str(exc), param="policy") from None
        return policies.get(name)

    async def pipeline(self) -> ChatPipeline:
        return ChatPipeline(
            self.engine,
            await self.ensure_policies(),
            self.writer,
            self.books,
            tito=self.tito,
            max_model_len=self.max_model_len,
            load_version=self.ensure_version,
            source=self.settings.call_source,
        )

    async def ensure_version(self, name: str, version: int) -> str:
        """The engine's name for a policy's version, loaded on demand (pinned rollouts, ``gateway.policy.pins``)."""
        policies = await self.ensure_policies()
        policy = policies.get(name)
        held = policy.pinned("", version)
        if held is not None:  # the hot path: no lock
            return held.engine_model
        async with self.publish_lock:  # the loaded set changes one publication (or load) at a time
            return await load_version(self.engine, policies, policy, self.store, version)

    async def tito(self) -> TitoEngine:
        """The tito renderer, loaded on first use (tokenizer and template of the model folder)."""
        if self._tito is not None:
            return self._tito
        await self.ensure_policies()
        folder = self.settings.model_dir or self.model_root
        if not folder or not Path(folder, "tokenizer.json").exists():
            raise InvalidRequest(
                "tito capture needs the model folder (chat template and tokenizer): start the gateway "
                "with `harnessrl serve --model DIR`, or `--tokenizer DIR` when attaching to an engine"
            )
        # One load: the first calls come together, and transformers' lazy import is not thread-safe
        # (two threads importing it at once: "cannot import name 'AutoTokenizer'").
        async with self._tito_lock:
            if self._tito is None:
                text = await asyncio.to_thread(ModelText, Path(folder))
                self._tito = TitoEngine(text, self.engine, self.store.calls.recent_outputs)
        return self._tito

    async def decoder(self) -> TokenDecoder | None:
        """The model's tokenizer for decoding, loaded once off the event loop; None without one."""
        if self._decoder is not None:
            return self._decoder
        async with self._decoder_lock:
            if self._decoder is None:
                folder = tokenizer_folder(self.settings.model_dir, await self._model_root())
                if folder is None:
                    return None  # not cached: the engine may report its folder later
                self._decoder = await asyncio.to_thread(TokenDecoder.load, folder)
        return self._decoder

    async def _model_root(self) -> str | None:
        if self.model_root is None and self.policies is None and not self.settings.model_dir:
            try:  # reading needs no engine: a down engine only means no tokenizer yet
                await self.ensure_policies()
            except GatewayError:
                pass
        return self.model_root

    async def _discover_base_model(self) -> tuple[str, int | None]:
        if self.settings.base_model:
            return self.settings.base_model, None
        models = await self.engine.models()
        base = base_model_entry(models)
        if base is None:
            raise EngineUnavailable("engine serves no base model yet")
        self.model_root = base.get("root")
        return base["id"], base.get("max_model_len")


async def get_state(request: Request) -> GatewayState:
    # async: a sync dependency would cost a threadpool hop on every call
    return request.app.state.gateway


StateDep = Annotated[GatewayState, Depends(get_state)]


async def admin_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    require_admin(request, state.settings.admin_key)
    return state


# The same state, behind the admin key (``guard`` already requires it for every control-plane route).
AdminStateDep = Annotated[GatewayState, Depends(admin_state)]
