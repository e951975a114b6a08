"""Table models of the trajectory store (SQLAlchemy 2 declarative, typed with ``Mapped``).

Token and logprob arrays are packed binary (little-endian int32 / float32, see ``arrays``),
never JSON: a 32k-token prompt is 128 KiB instead of ~200 KiB of text and decodes in microseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets 64-bit ids.
Id = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """A moment, written in UTC and read back in UTC with its offset on every database: SQLite keeps no zone
    (its values would read naive, and print with no offset in the API's JSON, exports and traces)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Task(Base):
    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    name: Mapped[str] = mapped_column(String(400))
    spec: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Group(Base):
    __tablename__ = "groups"
    __table_args__ = (UniqueConstraint("task_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    # open -> ready (all `size` rollouts ended and scored) -> consumed (trained on by the learner),
    # or ready -> quarantined: the learner could not use it (`error` says why) and moved on
    status: Mapped[str] = mapped_column(String(20), default="open", index=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it was quarantined
    size: Mapped[int | None] = mapped_column(Integer, nullable=True)  # G; None: no readiness tracking
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Rollout(Base):
    __tablename__ = "rollouts"
    # A retried POST /api/rollouts with the same request id finds the rollout the first one created.
    __table_args__ = (Index("ix_rollouts_run_request", "run_id", "request_id", unique=True),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    group_id: Mapped[int] = mapped_column(ForeignKey("groups.id"), index=True)
    # Secret bearer token; the agent's base URL is /r/<token>/v1.
    token: Mapped[str] = mapped_column(String(64), unique=True)
    # running -> finished | failed | cancelled (ended without a result; its place in the group is free)
    status: Mapped[str] = mapped_column(String(20), default="running", index=True)
    # The total of the non-None components in `rewards` (None when every component is None).
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    rewards: Mapped[dict] = mapped_column(JSON, default=dict, server_default="{}")  # name -> value | None
    # name -> how that component was reached, e.g. the judge's model, tokens, cost (USD) and reasons
    reward_details: Mapped[dict] = mapped_column(JSON, default=dict, server_default="{}")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    meta: Mapped[dict] = mapped_column(JSON, default=dict)
    # The client's id for the creating request (idempotent retries) and a digest of what it asked for.
    request_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The policy version the control plane pinned this rollout to (evaluation: 0 = the base model);
    # every call is served by it whatever model the agent names. Null: the current version at its start.
    pinned_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The policy serving its calls (store.policies): its run's, or the one its pin names; never the agent's choice.
    policy: Mapped[str] = mapped_column(String(64), default="policy", server_default="policy")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Kept when it ends: seconds its calls spent in the engine (the gateway's clock forgets them then),
    # the agent's exit status and the tail of its own output (the runner's; null where none ran).
    engine_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    agent_exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    agent_log: Mapped[str | None] = mapped_column(Text, nullable=True)


class Call(Base):
    """One upstream engine call: the exact tokens the model saw and sampled."""

    __tablename__ = "calls"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id"), index=True)
    # The call graph: the earlier call this one extends (null: a root), and for a root that
    # diverged inside an earlier call's sampled tokens, that call and how many tokens drifted.
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("calls.id"), nullable=True, index=True)
    fork_of: Mapped[int | None] = mapped_column(ForeignKey("calls.id"), nullable=True)
    drift_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    dialect: Mapped[str] = mapped_column(String(20))  # chat | completions | responses | messages
    model: Mapped[str] = mapped_column(String(200))  # the public name the client asked for
    engine_model: Mapped[str] = mapped_column(String(200))  # base model or adapter name in vLLM
    policy: Mapped[str] = mapped_column(String(64), default="policy", server_default="policy")  # store.policies
    policy_version: Mapped[int] = mapped_column(Integer, default=0)
    # int32 LE: the prompt from prompt_offset on; the tokens before it are the parent's prompt + output
    # (store.prompt_delta). Read through the store, which gives whole prompts.
    prompt_ids: Mapped[bytes] = mapped_column(LargeBinary)
    prompt_offset: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    output_ids: Mapped[bytes] = mapped_column(LargeBinary)  # int32 LE
    # uint8, one store.records.TokenRole per prompt token from prompt_offset on (the prefix's are the
    # parent's, its output's ASSISTANT: store.roles); null: unknown (and every call before revision 0018)
    prompt_roles: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    # float32 LE, one per output id; null for a call the policy did not sample (source is not "policy")
    output_logprobs: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    # who wrote the output: "policy" (sampled by the engine), "teacher" (an external model through
    # harnessrl.teachers.teacher) or "demonstration" (a task's reference solution played as the agent's calls)
    source: Mapped[str] = mapped_column(String(20), default="policy", server_default="policy")
    num_prompt_tokens: Mapped[int] = mapped_column(Integer)
    num_output_tokens: Mapped[int] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    request: Mapped[dict] = mapped_column(JSON)  # the client's body, as received
    response: Mapped[dict] = mapped_column(JSON)  # the engine's body, as received
    tags: Mapped[list] = mapped_column(JSON, default=list)
    latency_ms: Mapped[float] = mapped_column(Float)  # engine round trip
    # The sampling the engine applied: a training run's fixed settings; null where the client left a
    # setting to the engine (adhoc calls) or the call predates recording them.
    temperature: Mapped[float | None] = mapped_column(Float, nullable=True)
    top_p: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The engine that served the call (base URL), ms it queued for a slot there (part of latency_ms),
    # and the engine its rollout was moved from when that one failed (this call re-prefilled there);
    # null before revision 0009.
    engine: Mapped[str | None] = mapped_column(String(400), nullable=True)
    queue_ms: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    moved_from: Mapped[str | None] = mapped_column(String(400), nullable=True)
    # the digest of the adapter that served the call (adapters.digest of its version); null for the
    # base model, a version published without one, or before revision 0014
    adapter_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RolloutLease(Base):
    """Which rollout worker runs one (round, task, index) of a run, and until when (``store.leases``)."""

    __tablename__ = "rollout_leases"
    __table_args__ = (
        UniqueConstraint("run", "round", "task", "slot"),
        Index("ix_rollout_leases_claimable", "run", "round", "status", "expires_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run: Mapped[str] = mapped_column(String(200))  # the run's name (the run row may not exist yet)
    round: Mapped[int] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(400))
    slot: Mapped[int] = mapped_column(Integer)  # the rollout's index in its group, 0..G-1
    # open (nobody holds it) -> claimed (``worker`` until ``expires_at``) -> done (``rollout_id`` ended it)
    status: Mapped[str] = mapped_column(String(20), default="open")
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)  # seconds since the epoch, the gateway's clock
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims so far (1 + times it was taken over)
    rollout_id: Mapped[int | None] = mapped_column(Id, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class Adapter(Base):
    """A published policy version (LoRA adapter) and whether engines hold it."""

    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("policy", "version", name="uq_adapters_policy_version"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    policy: Mapped[str] = mapped_column(String(64), default="policy", server_default="policy")  # store.policies
    version: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200), unique=True)  # vLLM adapter name, <policy>-v{N}
    path: Mapped[str] = mapped_column(Text)
    loaded: Mapped[bool] = mapped_column(default=False)
    # contracts.adapter_proof: sha256 of its config and weights; the learner's probe (token ids and
    # log-probs); what each engine answered to it at publication. Null before revision 0014 or when
    # the publisher sent none.
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    probe: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    proof: Mapped[list | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LearnerCheckpoint(Base):
    """A learner checkpoint that was fully written to disk, and the groups it covers.

    The row is inserted in the same transaction that marks ``group_ids`` consumed, and only after
    the checkpoint folder at ``path`` was renamed into place: a committed row always points at a
    complete checkpoint, and a group is consumed exactly when a committed checkpoint covers it.
    """

    __tablename__ = "learner_checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)  # optimizer steps taken (batches trained) so far
    version: Mapped[int] = mapped_column(Integer)  # policy version the learner holds at this step
    path: Mapped[str] = mapped_column(Text)  # the checkpoint folder
    group_ids: Mapped[list] = mapped_column(JSON)  # groups consumed since the previous checkpoint
    # Consumed position: the last group covered, in (ready_at, id) order (for reports and checks).
    last_ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_group_id: Mapped[int | None] = mapped_column(Id, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class CallMismatch(Base):
    """How far the learner's log-probs of one trained call's sampled tokens were from the sampler's
    (learner.mismatch): per token, and summed up. One row per call (a retrained call is overwritten)."""

    __tablename__ = "call_mismatch"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    call_id: Mapped[int] = mapped_column(ForeignKey("calls.id"), unique=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)  # the learner step that trained it
    version: Mapped[int] = mapped_column(Integer)  # the policy version the learner's weights were
    tokens: Mapped[int] = mapped_column(Integer)  # tokens compared (sampled by that version)
    mean_abs: Mapped[float | None] = mapped_column(Float, nullable=True)  # nats; null when none compared
    max_abs: Mapped[float | None] = mapped_column(Float, nullable=True)
    k3: Mapped[float | None] = mapped_column(Float, nullable=True)  # mean exp(Δ) - 1 - Δ: KL(sampler || learner)
    frac_over: Mapped[float | None] = mapped_column(Float, nullable=True)  # share with |Δ| > 0.1 nats
    # float16 LE, one per output token: learner - sampler log-prob, NaN where not compared
    deltas: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LearnerStep(Base):
    """The metrics of one learner step (JSON: the keys evolve without migrations)."""

    __tablename__ = "learner_steps"
    __table_args__ = (UniqueConstraint("run_id", "step"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LiveKey(Base):
    """An API key a person's own agent uses every day: each session of it becomes a rollout by itself
    (``store.live_keys``). Only the key's sha256 is kept; the key is shown once, when created."""

    __tablename__ = "live_keys"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    user_name: Mapped[str] = mapped_column(String(200), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    train: Mapped[bool] = mapped_column(default=False)  # its user opted in to training on its sessions
    idle_s: Mapped[float] = mapped_column(Float, default=1800.0)  # a call after this much silence opens a session
    # The session open now: its rollout, the name the agent gave it (x-harnessrl-session), its last call
    # (seconds since the epoch, the gateway's clock).
    session_rollout_id: Mapped[int | None] = mapped_column(Id, nullable=True)
    session_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    last_call_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
