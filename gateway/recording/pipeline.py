"""The session pipeline every dialect goes through: one normalized chat call, recorded.

Dialects translate their request into a Chat Completions body, call ``ChatPipeline.chat`` (streaming
clients: ``chat_stream``, whose chunks they translate as they arrive) and translate the engine's
answer back into their own shape. Recording (tokens, logprobs, policy version) happens here once."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace

import numpy as np

from gateway.dialects import COMPLETIONS
from gateway.engine.client import EngineClient
from gateway.engine.routing import begin_call, served_fields
from gateway.engine.token_prefix import TokenIds, as_array, prompt_hint
from gateway.errors import EngineError, NotFound, PayloadTooLarge
from gateway.policy.policy_set import PolicySet
from gateway.policy.registry import ResolvedModel
from gateway.policy.sampling import engine_sampling, sampled_with
from gateway.recording.call_books import CallBooks
from gateway.recording.callgraph import GraphNode
from gateway.recording.engine_request import engine_chat_body, engine_completion_body
from gateway.recording.streaming import CompletionAssembler, StreamedCall
from gateway.request.retries import RETRIED, Attempt, retry_count
from gateway.request.tagging import side_call_tags
from gateway.tito.serving import TitoEngine
from store.arrays import LOGPROBS
from store.records import CallRecord, RolloutIdentity, RolloutsDeleted
from store.samples import UNDELIVERED
from store.stored_bytes import BudgetSpent, OverBudget
from store.writer import CallWriter


@dataclass(frozen=True)
class RecordedAnswer:
    call_id: int
    answer: dict  # the engine's response body, as received (chat.completion or text_completion)
    resolved: ResolvedModel


class ChatPipeline:
    def __init__(
        self,
        engine: EngineClient,
        policies: PolicySet,
        writer: CallWriter,
        books: CallBooks,
        tito: Callable[[], Awaitable[TitoEngine]] | None = None,
        max_model_len: int | None = None,
        load_version: Callable[[str, int], Awaitable[str]] | None = None,
        source: str = "policy",
    ):
        self.engine, self.policies, self.writer = engine, policies, writer
        self.source = source  # who writes the engine's answers (store.records.CALL_SOURCES)
        self._load_version = load_version  # loads a pinned rollout's version when it is not loaded
        self._tito, self.max_model_len = tito, max_model_len
        # What the gateway keeps across calls, each an attribute here: one lookup per use on the hot path.
        self.graph, self.metrics, self.engine_clock = books.graph, books.metrics, books.engine_clock
        self.refusals, self.retries = books.refusals, books.retries
        self.prefixes, self.engine_bodies, self.roles = books.prefixes, books.engine_bodies, books.roles

    async def chat(
        self, chat_body: dict, identity: RolloutIdentity, dialect: str, client_request: dict, top_logprobs: int = 0
    ) -> RecordedAnswer:
        """Send a (validated) Chat Completions body to the engine and record the call.

        ``client_request`` is what the client sent in its own dialect; it is stored verbatim. A training
        run's sampling settings replace the client's (``gateway.policy.sampling``), in both capture modes.
        """
        chat_body = engine_sampling(chat_body, client_request, identity.sampling)
        resolved = await self._resolve(identity, chat_body["model"])
        attempt = self.retries.begin(identity.rollout_id, client_request, retry_count.get() > 0)
        try:
            with self.refusals.noting(identity, chat_body):
                if identity.capture == "tito" and self._tito is not None:
                    tito = await self._tito()
                    answer, latency_ms = await self._timed(
                        tito.chat(
                            chat_body, resolved.engine_model, identity.rollout_id, self.max_model_len, top_logprobs
                        ),
                        identity,
                        resolved,
                    )
                else:
                    body = self.engine_bodies.encode(
                        identity.rollout_id, engine_chat_body(chat_body, resolved, top_logprobs, stream=False)
                    )
                    answer, latency_ms = await self._timed(self.engine.chat(body), identity, resolved)
            recorded = await self._commit_answer(
                identity, dialect, client_request, resolved, chat_body, answer, latency_ms
            )
            await self._settle_retries(attempt, recorded.call_id)
            return recorded
        finally:
            self.retries.end(attempt)

    async def chat_stream(
        self, chat_body: dict, identity: RolloutIdentity, dialect: str, client_request: dict, top_logprobs: int = 0
    ) -> StreamedCall:
        """``chat``, streamed: the engine accepted the call (its errors are raised here, before any
        byte goes out); the returned call yields its chunks and records it at the end. A tito call
        streams the chunks its completions stream makes (``gateway.tito.stream``)."""
        chat_body = engine_sampling(chat_body, client_request, identity.sampling)
        resolved = await self._resolve(identity, chat_body["model"])
        tito = await self._tito() if identity.capture == "tito" and self._tito is not None else None
        attempt, timers = self._stream_timers(identity, client_request, resolved)
        try:
            with self.refusals.noting(identity, chat_body):
                if tito is not None:
                    stream = await tito.chat_stream(
                        chat_body, resolved.engine_model, identity.rollout_id, self.max_model_len, top_logprobs
                    )
                else:
                    body = engine_chat_body(chat_body, resolved, top_logprobs, stream=True)
                    stream = await self.engine.chat_stream(self.engine_bodies.encode(identity.rollout_id, body))
        except BaseException:
            timers.close()
            raise

        async def commit(answer: dict, latency_ms: float, tags: list[str]) -> int:
            if tito is not None and not tags:
                tito.remember(identity.rollout_id, answer)
            recorded = await self._commit_answer(
                identity, dialect, client_request, resolved, chat_body, answer, latency_ms, tags
            )
            await self._settle_retries(attempt, recorded.call_id)
            return recorded.call_id

        return StreamedCall(stream, commit, timers, self.writer.add_tag)

    def _stream_timers(
        self, identity: RolloutIdentity, client_request: dict, resolved: ResolvedModel
    ) -> tuple[Attempt, ExitStack]:
        """A stream's call in flight (its adapter held), on the rollout's engine clock and among its
        attempts until it ends."""
        timers = ExitStack()
        timers.enter_context(self.metrics.call_in_flight())
        timers.enter_context(self.policies.serving(resolved.engine_model))
        timers.enter_context(self.engine_clock.timing(identity.rollout_id))
        attempt = self.retries.begin(identity.rollout_id, client_request, retry_count.get() > 0)
        timers.callback(self.retries.end, attempt)
        return attempt, timers

    async def _commit_answer(
        self,
        identity: RolloutIdentity,
        dialect: str,
        client_request: dict,
        resolved: ResolvedModel,
        chat_body: dict,
        answer: dict,
        latency_ms: float,
        extra_tags: tuple[str, ...] | list[str] = (),
    ) -> RecordedAnswer:
        """The chat call recorded; the caller settles its retries (``_settle_retries``)."""
        choice = only_choice(answer)
        logprobs = [entry["logprob"] for entry in (choice.get("logprobs") or {}).get("content") or []]
        read = self._read(identity, answer, answer.get("prompt_token_ids"), choice, logprobs)
        sampling = sampled_with(chat_body)
        record = _record(identity, dialect, client_request, resolved, read, latency_ms, sampling, self.source)
        tags = side_call_tags(chat_body.get("messages") or [], bool(chat_body.get("tools")), identity.side_patterns)
        roles = await self.roles.of(identity, chat_body, read.prompt, self._tito, self.metrics)
        return await self._commit(identity, record, read.sequence, answer, resolved, [*tags, *extra_tags], roles)

    async def _settle_retries(self, attempt: Attempt, call_id: int) -> None:
        """A call a retry replaced is tagged ``retried`` (and ``undelivered``: its client gave up on it)."""
        attempt.call_id = call_id
        replaced = [attempt.retry_of.call_id] if attempt.retry_of and attempt.retry_of.call_id else []
        for retried in ([call_id] if attempt.superseded else []) + replaced:
            for tag in (RETRIED, UNDELIVERED):
                await self.writer.add_tag(retried, tag)

    async def completion(
        self, completion_body: dict, identity: RolloutIdentity, client_request: dict, logprobs: int = 0
    ) -> RecordedAnswer:
        """Send a Completions body (a single prompt) to the engine and record the call."""
        completion_body = engine_sampling(completion_body, client_request, identity.sampling)
        resolved = await self._resolve(identity, completion_body["model"])
        body = engine_completion_body(completion_body, resolved, logprobs, stream=False)
        with self.refusals.noting(identity, None):
            answer, latency_ms = await self._timed(self.engine.completions(body), identity, resolved)
        return await self._commit_completion(
            identity, client_request, resolved, completion_body, answer, latency_ms, []
        )

    async def completion_stream(
        self, completion_body: dict, identity: RolloutIdentity, client_request: dict, logprobs: int = 0
    ) -> StreamedCall:
        """``completion``, streamed through (as ``chat_stream``)."""
        completion_body = engine_sampling(completion_body, client_request, identity.sampling)
        resolved = await self._resolve(identity, completion_body["model"])
        attempt, timers = self._stream_timers(identity, client_request, resolved)
        try:
            with self.refusals.noting(identity, None):
                stream = await self.engine.completions_stream(
                    engine_completion_body(completion_body, resolved, logprobs, stream=True)
                )
        except BaseException:
            timers.close()
            raise

        async def commit(answer: dict, latency_ms: float, tags: list[str]) -> int:
            recorded = await self._commit_completion(
                identity, client_request, resolved, completion_body, answer, latency_ms, tags
            )
            await self._settle_retries(attempt, recorded.call_id)
            return recorded.call_id

        return StreamedCall(stream, commit, timers, self.writer.add_tag, CompletionAssembler())

    async def _commit_completion(
        self,
        identity: RolloutIdentity,
        client_request: dict,
        resolved: ResolvedModel,
        completion_body: dict,
        answer: dict,
        latency_ms: float,
        tags: list[str],
    ) -> RecordedAnswer:
        choice = only_choice(answer)
        token_logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        read = self._read(identity, answer, choice.get("prompt_token_ids"), choice, token_logprobs)
        sampling = sampled_with(completion_body)
        record = _record(identity, COMPLETIONS.name, client_request, resolved, read, latency_ms, sampling, self.source)
        return await self._commit(identity, record, read.sequence, answer, resolved, tags)

    def _read(
        self, identity: RolloutIdentity, answer: dict, prompt_ids: TokenIds | None, choice: dict, logprobs: list[float]
    ) -> EngineAnswer:
        """The answer with the call's prompt and output ids as arrays (an answer read with its hint has the
        prompt's as one)."""
        output_ids = choice.get("token_ids")
        if prompt_ids is None or output_ids is None:
            raise EngineError(
                502,
                "engine did not return token ids (return_token_ids); the gateway needs vLLM >= 0.10.2 to record calls",
            )
        prompt, output = as_array(prompt_ids), as_array(output_ids)
        hint = prompt_hint.get()
        sequence = self.prefixes.add(identity.rollout_id, prompt, output, hint and hint.text)
        return EngineAnswer(answer, choice, logprobs, prompt, output, sequence)

    async def _resolve(self, identity: RolloutIdentity, requested: str) -> ResolvedModel:
        """The version serving this call, of the rollout's own policy (never one the model name picks):
        a pinned rollout's own version (the model it names is ignored), else the registry's choice for
        the rollout. A rollout past its byte budget is refused first: its call could not be recorded."""
        try:
            await self.writer.check_budget(identity.rollout_id)
        except BudgetSpent as exc:
            raise over_budget(str(exc)) from None
        begin_call(identity.rollout_id)  # the engine pool routes this call by its rollout (gateway.engine.pool)
        prompt_hint.set(self.prefixes.hint(identity.rollout_id))  # its answer's prompt ids read as a delta
        policy = self.policies.get(identity.policy)
        version = identity.pinned_version
        if version is None:
            return policy.resolve_for(identity.rollout_id, requested)
        resolved = policy.pinned(requested, version)
        if resolved is None and self._load_version is not None:
            await self._load_version(identity.policy, version)
            resolved = policy.pinned(requested, version)
        if resolved is None:
            raise EngineError(503, f"version {version} of policy {identity.policy!r} of this rollout is not loaded")
        return resolved

    async def _timed(self, awaitable, identity: RolloutIdentity, resolved: ResolvedModel) -> tuple[dict, float]:
        """The engine's answer and its round trip in milliseconds, counted as in flight meanwhile
        (its adapter held, and on the rollout's engine clock)."""
        started = time.perf_counter()
        with (
            self.metrics.call_in_flight(),
            self.engine_clock.timing(identity.rollout_id),
            self.policies.serving(resolved.engine_model),
        ):
            return await awaitable, (time.perf_counter() - started) * 1000.0

    async def _commit(
        self,
        identity: RolloutIdentity,
        record: CallRecord,
        sequence: np.ndarray,
        answer: dict,
        resolved: ResolvedModel,
        tags: list[str],
        prompt_roles: bytes | None = None,
    ) -> RecordedAnswer:
        """Link the call into its rollout's graph, tag it, and wait until it is committed."""
        self.refusals.answered(identity.rollout_id, tags)
        link = await self.graph.link(identity.rollout_id, record.prompt_ids)
        record = replace(
            record,
            tags=tags,
            parent_id=link.parent_id,
            prompt_offset=link.parent_tokens,
            fork_of=link.fork_of,
            drift_tokens=link.drift_tokens,
            prompt_roles=prompt_roles,
            **served_fields(),
        )
        # No other call in flight: nothing the commit could hold up, so it may skip the writer's hops.
        try:
            call_id = await self.writer.record(record, alone=self.metrics.calls_in_flight == 0)
        except RolloutsDeleted:
            raise NotFound(
                "this call's rollout was deleted while the call ran (its user was forgotten, or it was pruned): "
                "its answer was not recorded",
                code="rollout_deleted",
            ) from None
        except OverBudget as exc:
            raise over_budget(exc.messages[0]) from None
        self.metrics.recorded(record.dialect, record.latency_ms, len(record.prompt_ids), len(record.output_ids))
        self.metrics.turn(identity.harness, "side" if tags else link.kind, link.drift_tokens)
        node = GraphNode(call_id, len(record.prompt_ids), memoryview(sequence).cast("B"), bool(tags))  # bytes, no copy
        await self.graph.add(identity.rollout_id, node)
        return RecordedAnswer(call_id, answer, resolved)


def over_budget(message: str) -> PayloadTooLarge:
    """A call its rollout's byte budget has no room for (``store.stored_bytes``): a 413 in the client's
    dialect (no SDK retries one)."""
    return PayloadTooLarge(message, code="rollout_budget_exceeded")


def only_choice(answer: dict) -> dict:
    choices = answer.get("choices") or []
    if len(choices) != 1:
        raise EngineError(502, f"engine returned {len(choices)} choices, expected 1")
    return choices[0]


@dataclass(frozen=True)
class EngineAnswer:
    """The engine's answer to one call, read once: what its record is made of."""

    body: dict  # the engine's response body, as received (chat.completion or text_completion)
    choice: dict  # its one choice
    logprobs: list[float]  # the sampled tokens' log-probs (nats), as the engine reported them
    prompt: np.ndarray  # int32
    output: np.ndarray  # int32
    sequence: np.ndarray  # int32, read-only: prompt + output (what the rollout's next prompt likely extends)


def _record(
    identity: RolloutIdentity,
    dialect: str,
    client_request: dict,
    resolved: ResolvedModel,
    read: EngineAnswer,
    latency_ms: float,
    sampling: tuple[float | None, float | None],
    source: str,
) -> CallRecord:
    return CallRecord(
        rollout_id=identity.rollout_id,
        dialect=dialect,
        model=resolved.public_name,
        engine_model=resolved.engine_model,
        policy=resolved.policy,
        policy_version=resolved.version,
        adapter_digest=resolved.adapter_digest,
        # Arrays once, here: packing, linking and storing then cost a memcpy, not a list walk.
        prompt_ids=read.prompt,
        output_ids=read.output,
        # what a teacher reports is no sampler's log-prob: none is stored (the learner refuses such tokens)
        output_logprobs=np.asarray(read.logprobs, dtype=LOGPROBS) if source == "policy" else None,
        finish_reason=read.choice.get("finish_reason"),
        request=client_request,
        response=_without_token_arrays(read.body),
        latency_ms=latency_ms,
        temperature=sampling[0],
        top_p=sampling[1],
        source=source,
    )


def _without_token_arrays(answer: dict) -> dict:
    """The engine's body as stored: token arrays live in their binary columns, not twice in JSON."""
    stored = {k: v for k, v in answer.items() if k != "prompt_token_ids"}
    stored["choices"] = [{k: v for k, v in c.items() if k != "token_ids"} for c in answer.get("choices") or []]
    return stored
