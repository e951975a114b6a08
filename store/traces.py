"""A rollout as a trace: what the OpenTelemetry export (``gateway.recording.trace_export``) reads of an ended
rollout, its calls (scalar columns only, never the token blobs or bodies) and their mismatch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.tables import Call, CallMismatch, Rollout, Run, Task


@dataclass(frozen=True)
class TracedCall:
    call_id: int
    parent_id: int | None
    fork_of: int | None
    dialect: str  # chat | completions | responses | messages
    model: str  # the public name the client asked for
    engine_model: str
    policy_version: int
    adapter_digest: str | None
    source: str  # policy | teacher | demonstration
    input_tokens: int
    output_tokens: int
    finish_reason: str | None
    response_id: str | None  # the engine's answer id
    tags: tuple[str, ...]
    temperature: float | None
    top_p: float | None
    latency_ms: float
    recorded_at: datetime  # when the answer was stored: the call's end
    mismatch_mean_abs: float | None  # learner.mismatch, once the learner trained it
    policy: str = "policy"  # the policy that served it (store.policies)


@dataclass(frozen=True)
class RolloutTrace:
    rollout_id: int
    run: str
    task: str
    group_id: int
    harness: str | None
    status: str
    error: str | None
    reward: float | None
    started_at: datetime
    ended_at: datetime | None
    calls: tuple[TracedCall, ...]  # by id


CALL_FIELDS = (
    Call.id,
    Call.parent_id,
    Call.fork_of,
    Call.dialect,
    Call.model,
    Call.engine_model,
    Call.policy_version,
    Call.adapter_digest,
    Call.source,
    Call.num_prompt_tokens,
    Call.num_output_tokens,
    Call.finish_reason,
    Call.response["id"].as_string().label("response_id"),  # not the whole body: it holds every token
    Call.tags,
    Call.temperature,
    Call.top_p,
    Call.latency_ms,
    Call.created_at,
    CallMismatch.mean_abs,
    Call.policy,
)


def _traced(row) -> TracedCall:
    return TracedCall(
        row.id,
        row.parent_id,
        row.fork_of,
        row.dialect,
        row.model,
        row.engine_model,
        row.policy_version,
        row.adapter_digest,
        row.source,
        row.num_prompt_tokens,
        row.num_output_tokens,
        row.finish_reason,
        row.response_id,
        tuple(row.tags or ()),
        row.temperature,
        row.top_p,
        row.latency_ms,
        row.created_at,
        row.mean_abs,
        row.policy,
    )


class Traces:
    """Ended rollouts as traces for the OpenTelemetry export."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def of_rollout(self, rollout_id: int) -> RolloutTrace | None:
        head = (
            select(Rollout, Run.name, Task.name)
            .join(Run, Run.id == Rollout.run_id)
            .join(Task, Task.id == Rollout.task_id)
            .where(Rollout.id == rollout_id)
        )
        calls = (
            select(*CALL_FIELDS)
            .outerjoin(CallMismatch, CallMismatch.call_id == Call.id)
            .where(Call.rollout_id == rollout_id)
            .order_by(Call.id)
        )
        async with self.sessions() as session:
            found = (await session.execute(head)).first()
            if found is None:
                return None
            rows = (await session.execute(calls)).all()
        rollout, run, task = found
        meta = rollout.meta if isinstance(rollout.meta, dict) else {}
        return RolloutTrace(
            rollout.id,
            run,
            task,
            rollout.group_id,
            meta.get("harness"),
            rollout.status,
            rollout.error,
            rollout.reward,
            rollout.created_at,
            rollout.finished_at,
            tuple(_traced(row) for row in rows),
        )
