"""Per-token train/inference mismatch of trained calls (table ``call_mismatch``).

The learner writes one row per call it trained (``learner.mismatch.call_deltas``): the difference
between its log-prob and the sampler's for each sampled token of the call's output, and the summary.
The call API (``GET /api/calls/{id}``) and the viewer's heatmap read it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.arrays import deltas_array, pack_deltas
from store.health import calls_of
from store.tables import Call, CallMismatch, Rollout, utcnow


@dataclass(frozen=True)
class CallMismatchRecord:
    call_id: int
    step: int  # the learner step that trained the call
    version: int  # the policy version the learner's weights were (compared tokens were sampled by it)
    tokens: int  # tokens compared
    mean_abs: float | None  # nats per compared token; None when none was compared
    max_abs: float | None
    k3: float | None  # mean exp(Δ) - 1 - Δ, an estimate of KL(sampler || learner)
    frac_over: float | None  # share of compared tokens with |Δ| above learner.mismatch.THRESHOLD
    deltas: np.ndarray  # float32 [output_len]: learner - sampler log-prob, NaN where not compared


@dataclass(frozen=True)
class MismatchSummary:
    """A run's trained calls of one harness, model and policy version, their tokens pooled."""

    harness: str | None
    model: str  # the public name the agent asked for
    version: int  # the policy version that sampled the compared tokens
    calls: int
    tokens: int
    mean_abs: float | None  # nats per compared token
    max_abs: float | None
    k3: float | None
    frac_over: float | None


class Mismatches:
    """Per-call train-inference mismatch: saved by the learner, read by the gateway and reports."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions

    async def save(self, run_id: int, records: Sequence[CallMismatchRecord]) -> None:
        """Write the records, replacing what an earlier training of the same calls left."""
        if not records:
            return
        async with self.sessions.begin() as session:
            await session.execute(delete(CallMismatch).where(CallMismatch.call_id.in_([r.call_id for r in records])))
            session.add_all(
                CallMismatch(
                    call_id=r.call_id,
                    run_id=run_id,
                    step=r.step,
                    version=r.version,
                    tokens=r.tokens,
                    mean_abs=r.mean_abs,
                    max_abs=r.max_abs,
                    k3=r.k3,
                    frac_over=r.frac_over,
                    deltas=pack_deltas(r.deltas),
                    created_at=utcnow(),
                )
                for r in records
            )

    async def of_call(self, call_id: int) -> CallMismatchRecord | None:
        async with self.sessions() as session:
            row = await session.scalar(select(CallMismatch).where(CallMismatch.call_id == call_id))
        if row is None:
            return None
        return CallMismatchRecord(
            row.call_id,
            row.step,
            row.version,
            row.tokens,
            row.mean_abs,
            row.max_abs,
            row.k3,
            row.frac_over,
            deltas_array(row.deltas),
        )

    async def summary(
        self, run_id: int | None = None, version: int | None = None, *, policy: str | None = None
    ) -> list[MismatchSummary]:
        """Per (harness, model, version) of the run (or of every call ``policy`` served): token-weighted means
        of the calls' mismatch; one policy ``version``'s only when given (the learner's per-step export reads
        just the version it trained)."""
        harness = Rollout.meta["harness"].as_string()
        tokens = func.sum(CallMismatch.tokens)

        def weighted(column):
            return func.sum(column * CallMismatch.tokens) / func.nullif(tokens, 0)

        query = (
            select(
                harness,
                Call.model,
                CallMismatch.version,
                func.count(CallMismatch.id),
                tokens,
                weighted(CallMismatch.mean_abs),
                func.max(CallMismatch.max_abs),
                weighted(CallMismatch.k3),
                weighted(CallMismatch.frac_over),
            )
            .join(Call, Call.id == CallMismatch.call_id)
            .join(Rollout, Rollout.id == Call.rollout_id)
            .where(calls_of(run_id, policy), CallMismatch.tokens > 0)
            .group_by(harness, Call.model, CallMismatch.version)
            .order_by(harness, Call.model, CallMismatch.version)
        )
        if version is not None:
            query = query.where(CallMismatch.version == version)
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [
            MismatchSummary(*row[:4], int(row[4]), *(None if v is None else float(v) for v in row[5:])) for row in rows
        ]
