"""Internal records passed between the gateway's layers (not wire, not table models)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import IntEnum, StrEnum
from typing import TypeVar

from store.capture_modes import DEFAULT_CAPTURE, capture_of

R = TypeVar("R")


class RolloutStatus(StrEnum):
    """A rollout's ``status`` column (and REST field): running until the runner ends it once."""

    RUNNING = "running"
    FINISHED = "finished"  # the agent ran and the verifier scored it
    FAILED = "failed"  # the agent or its sandbox failed: scored 0, still in its group
    CANCELLED = "cancelled"  # interrupted (runner stopped, lease taken over): left out of its group


ENDED = (RolloutStatus.FINISHED, RolloutStatus.FAILED, RolloutStatus.CANCELLED)
SCORED = (RolloutStatus.FINISHED, RolloutStatus.FAILED)  # the ends a group and pass@k count


class GroupStatus(StrEnum):
    """A GRPO group's ``status``: open while its rollouts run, ready when all ended, then the learner's."""

    OPEN = "open"
    READY = "ready"
    CONSUMED = "consumed"  # trained on by a learner step
    QUARANTINED = "quarantined"  # refused by the learner (reason in ``error``): never read again


class LeaseStatus(StrEnum):
    """A rollout slot's lease (``rollout_leases.status``): which worker plays it, if any."""

    OPEN = "open"  # nobody holds it: the next claim takes it
    CLAIMED = "claimed"  # a worker holds it until ``expires_at`` (renewed while its rollout runs)
    DONE = "done"  # its rollout ended: never handed out again


class CallTag(StrEnum):
    """Tags the gateway itself puts on a call (harnesses add side-call tags: "title", "summary")."""

    UNDELIVERED = "undelivered"  # its response never reached its client
    RETRIED = "retried"  # the client sent the same body again: this one is superseded


class TokenRole(IntEnum):
    """Where a prompt token came from: one byte per token in ``calls.prompt_roles`` and ``Sample.roles``.

    A sampled (output) token is ``ASSISTANT``. ``UNKNOWN`` where the gateway could not tell (an engine
    capture whose rendering it could not reproduce, a call stored before revision 0018)."""

    UNKNOWN = 0
    SYSTEM = 1  # the system prompt and the tools' descriptions
    USER = 2
    TOOL = 3  # a tool result: what the environment said back
    ASSISTANT = 4  # the model's own turns
    TEMPLATE = 5  # the chat template's glue (role headers, turn ends, the generation prompt)


FALSE_FORK_TOKENS = 64  # a new root sharing this many leading tokens with an earlier call continues it


class RolloutsDeleted(LookupError):
    """Calls of rollouts deleted while the calls ran (``keys forget``, ``db prune``): nothing to record them in."""

    def __init__(self, rollout_ids: set[int]):
        super().__init__(f"rollouts {sorted(rollout_ids)} were deleted")
        self.rollout_ids = rollout_ids

    def refusal_for(self, record: CallRecord) -> Exception | None:
        """What ``record``'s caller is told, None when its rollout was not deleted."""
        return self if record.rollout_id in self.rollout_ids else None


@dataclass(frozen=True)
class GraphNode:
    """A recorded call as the call graph links it (``gateway.recording.callgraph``)."""

    call_id: int
    prompt_len: int  # tokens
    sequence: bytes | memoryview  # prompt + output ids, packed int32 LE (a view of the recorded array)
    side: bool = False  # a side call (title, summary): not the agent's main loop


@dataclass(frozen=True)
class SamplingSettings:
    """How a training run samples: fixed when the run is created, applied to each of its calls.

    Part of the policy: the learner recomputes log-probs at this temperature (vLLM's processed
    logprobs are those of the temperature-scaled distribution), so an agent must not change it.
    """

    temperature: float = 1.0
    top_p: float = 1.0

    @classmethod
    def from_config(cls, value: dict | None) -> SamplingSettings | None:
        """The settings a run's config holds (``config["sampling"]``); None: the run passes clients' through."""
        return None if not value else cls(float(value["temperature"]), float(value["top_p"]))

    def as_config(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p}


@dataclass(frozen=True)
class RolloutIdentity:
    """Who a call belongs to, resolved from its token (cached: tokens never change owner)."""

    rollout_id: int
    run_id: int
    token: str
    capture: str = DEFAULT_CAPTURE  # the run's capture mode (store.capture_modes)
    harness: str | None = None  # the agent driving the rollout (its side-call rules apply)
    side_patterns: tuple[tuple[str, str], ...] = ()  # (tag, regex) the harness declared (harnesses.harness.Harness)
    sampling: SamplingSettings | None = None  # the run's fixed sampling; None (adhoc): the client's own
    pinned_version: int | None = None  # the version the control plane pinned the rollout to (0 = base)
    policy: str = "policy"  # the policy serving its calls (store.policies): its run's or its pin's


# Who wrote a call's output: the policy (the engine sampled it, with log-probs), an external teacher
# model, or a demonstration (a task's solution played as the agent's calls; harnessrl.teachers.demonstrations).
CALL_SOURCES = ("policy", "teacher", "demonstration")


@dataclass(frozen=True)
class CallRecord:
    """One engine call as it is written to the store."""

    rollout_id: int
    dialect: str  # chat | completions | responses | messages
    model: str  # public model name the client asked for
    engine_model: str  # the engine's name for it (base model or <policy>-v{N})
    policy_version: int  # 0 = base model
    prompt_ids: Sequence[int]  # int32 arrays on the hot path (lists in tests)
    output_ids: Sequence[int]
    output_logprobs: Sequence[float] | None  # natural log, one per output id; None: not sampled by the policy
    finish_reason: str | None
    request: dict  # the client's body
    response: dict  # the engine's body
    latency_ms: float  # engine round trip, milliseconds
    tags: list[str] = field(default_factory=list)  # side-call tags ("title", "summary")
    parent_id: int | None = None  # the call this one extends (call graph)
    prompt_offset: int = 0  # leading prompt tokens that are the parent's prompt + output (stored once, there)
    fork_of: int | None = None  # root that diverged inside this call's sampled tokens
    drift_tokens: int = 0  # sampled tokens lost at that divergence
    temperature: float | None = None  # what the engine sampled with; None: the client left it to the engine
    top_p: float | None = None
    engine: str | None = None  # the engine that served it (base URL); None: not routed by an engine pool
    queue_ms: float = 0.0  # waiting for a slot on that engine, milliseconds
    moved_from: str | None = None  # the failed engine its rollout was moved from, on the first call after
    source: str = "policy"  # who wrote the output: one of CALL_SOURCES
    adapter_digest: str | None = None  # content digest of the adapter that served it (contracts.adapter_proof)
    policy: str = "policy"  # the policy that served it (store.policies)
    # uint8 [len(prompt_ids)]: each prompt token's TokenRole; None: not known (stored as NULL)
    prompt_roles: bytes | None = None


def record_of(kind: type[R], row) -> R:
    """A table row (ORM object or result row) as the store's record ``kind``: the fields it names."""
    return kind(**{f.name: getattr(row, f.name) for f in fields(kind)})


@dataclass(frozen=True)
class StoredRun:
    id: int
    name: str
    config: dict  # the run's settings (store/run_settings.py)
    created_at: datetime


@dataclass(frozen=True)
class StoredGroup:
    id: int
    run_id: int
    task_id: int
    name: str
    status: str  # GroupStatus
    error: str | None  # why it was quarantined
    size: int | None  # G; None: no readiness tracking
    ready_at: datetime | None
    created_at: datetime


@dataclass(frozen=True)
class StoredRollout:
    """A rollout as the store reads it back (its token is not carried: the API never shows it)."""

    id: int
    run_id: int
    task_id: int
    group_id: int
    status: str  # RolloutStatus
    reward: float | None  # the total of the non-None components of ``rewards``
    rewards: dict  # name -> value | None
    reward_details: dict  # name -> how that component was reached
    error: str | None
    meta: dict
    pinned_version: int | None  # the policy version its calls were pinned to (None: the current one)
    policy: str  # the policy serving its calls (store.policies)
    created_at: datetime
    finished_at: datetime | None
    engine_s: float | None  # s its calls spent in the engine
    agent_exit_code: int | None
    agent_log: str | None


@dataclass(frozen=True)
class RolloutOutcome:
    """What a listing of a group shows of each of its rollouts."""

    id: int
    status: str
    reward: float | None


@dataclass(frozen=True)
class StoredAdapter:
    """A published policy version (LoRA adapter) and whether engines hold it."""

    id: int
    policy: str  # store.policies
    version: int
    name: str  # the engine's adapter name, <policy>-v{N}
    path: str
    loaded: bool
    digest: str | None  # contracts.adapter_proof: sha256 of its config and weights
    probe: dict | None  # the learner's probe (token ids and log-probs)
    proof: list | None  # what each engine answered to the probe at publication
    created_at: datetime


@dataclass(frozen=True)
class StoredStep:
    """The metrics of one learner step."""

    id: int
    run_id: int
    step: int
    metrics: dict
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class StoredCall:
    """A recorded call as the store reads it back: the whole prompt (deltas resolved) and the token arrays
    unpacked (empty where a listing was asked without tokens); the request as the agent sent it and the
    engine's response only where read one call at a time (None in listings).

    The REST API's ``CallView`` (gateway/api/protocol.py) is derived from these fields, in this order and
    with these defaults, all but the request and the response: a field added here is on the wire too.
    """

    id: int
    rollout_id: int
    parent_id: int | None
    fork_of: int | None
    drift_tokens: int
    dialect: str
    model: str
    engine_model: str
    policy: str = "policy"  # the policy that served it (store.policies)
    policy_version: int
    prompt_ids: list[int]  # [] in listings asked without tokens
    # the prompt's TokenRoles as runs (name, start, end), end exclusive (store.roles); None: unknown;
    # [] in listings asked without tokens
    prompt_roles: list[tuple[str, int, int]] | None = None
    output_ids: list[int]
    output_logprobs: list[float] | None  # None: not sampled by the policy (see source)
    source: str = "policy"  # who wrote the output: policy | teacher | demonstration
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: str | None
    tags: list[str]
    latency_ms: float
    temperature: float | None = None  # the sampling the engine applied (None: left to the engine)
    top_p: float | None = None
    # sha256 of the adapter (config and weights) that served the call: the one its version published
    # (GET /admin/policy); None for the base model or a version published without one
    adapter_digest: str | None = None
    created_at: datetime
    request: dict | None = None
    response: dict | None = None


@dataclass(frozen=True)
class AgentReport:
    """What the runner saw of a rollout's agent, kept with the rollout when it ends."""

    exit_code: int | None = None  # the agent's exit status
    log: str | None = None  # the tail of its own output (at most AGENT_LOG_CHARS)


AGENT_LOG_CHARS = 16_384


def storable_text(text: str | None) -> str | None:
    """``text`` as every database stores it: PostgreSQL's text refuses NUL, which an agent's output may hold."""
    return None if text is None else text.replace("\x00", "\ufffd")


def identity_of(
    rollout_id: int,
    run_id: int,
    token: str,
    run_config: dict,
    meta: dict,
    pinned_version: int | None = None,
    policy: str = "policy",
) -> RolloutIdentity:
    """A rollout's identity from its stored run config and metadata (what the gateway keeps per token)."""
    patterns = meta.get("side_call_patterns") or {}
    return RolloutIdentity(
        rollout_id,
        run_id,
        token,
        capture_of(run_config),
        meta.get("harness"),
        tuple(sorted((str(k), str(v)) for k, v in patterns.items())),
        SamplingSettings.from_config(run_config.get("sampling")),
        pinned_version,
        policy,
    )
