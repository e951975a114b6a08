"""What `harnessrl report` plots, read with SQL aggregates.

A run may hold millions of calls: rewards per policy version and generation throughput are
GROUP BY queries (one row per version / per time bucket), never a load of the run's rows. Only
``learner_steps`` is read row by row: one small JSON row per optimizer step.

Time bucketing is the one dialect-specific piece: SQLite keeps timestamps as text (``julianday``
turns them into days), PostgreSQL as ``timestamptz`` (``extract(epoch ...)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import Float, Integer, cast, extract, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from store.listings import Listings
from store.summary import rewards_by_version
from store.tables import Call, Rollout
from store.training import Training

TARGET_BUCKETS = 40  # generation throughput: about this many points over the run's wall time
BUCKET_WIDTHS_S = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
UNIX_EPOCH_JULIAN_DAY = 2440587.5


@dataclass(frozen=True)
class StepPoint:
    """One learner step, from its stored metrics (None where the step did not report the key)."""

    step: int
    version: int  # the policy version the step's samples were judged against
    reward_mean: float | None  # every scored rollout of the step's groups
    reward_mean_kept: float | None  # rollouts of groups with a learning signal (reward std > 0)
    staleness_mean: float | None  # versions behind the learner, per sample
    staleness_max: int | None
    samples: int  # samples trained on
    tokens_trained: int  # tokens the loss covered (sampled, not stale, not masked)
    step_time_s: float | None  # batch, packing, forward/backward, optimizer, checkpoint
    # train/inference mismatch on the tokens the learner's own version sampled (nats; None: none compared)
    mismatch_mean_abs: float | None = None
    mismatch_max_abs: float | None = None
    mismatch_alarmed: bool = False  # above the learner's [loss] mismatch_alarm
    loss: float | None = None  # GRPO's term, per trained token
    echo_loss: float | None = None  # ECHO's mean NLL per tool-result token, before its weight; None: no ECHO

    @property
    def trained_tokens_per_s(self) -> float | None:
        if not self.step_time_s:
            return None
        return self.tokens_trained / self.step_time_s


@dataclass(frozen=True)
class VersionReward:
    """Scored rollouts served by one policy version (a rollout is pinned to its first call's version)."""

    version: int
    rollouts: int
    reward_mean: float
    reward_std: float  # population standard deviation over the rollouts

    @property
    def stderr(self) -> float:
        return self.reward_std / math.sqrt(self.rollouts) if self.rollouts > 1 else 0.0


@dataclass(frozen=True)
class GenerationThroughput:
    """Sampled output tokens per fixed-width time bucket, from the run's first call on."""

    bucket_s: int  # width of a bucket, seconds
    tokens: tuple[int, ...]  # output tokens of the calls created in bucket k (k = 0, 1, ...)
    calls: tuple[int, ...]  # calls created in bucket k

    @property
    def minutes(self) -> tuple[float, ...]:
        """Start of each bucket, minutes after the first call."""
        return tuple(k * self.bucket_s / 60 for k in range(len(self.tokens)))

    @property
    def tokens_per_min(self) -> tuple[float, ...]:
        # The last bucket may be only partly covered by the run: its rate reads low.
        return tuple(t * 60 / self.bucket_s for t in self.tokens)


@dataclass(frozen=True)
class ReportData:
    run: str
    steps: tuple[StepPoint, ...]
    versions: tuple[VersionReward, ...]
    generation: GenerationThroughput | None  # None: the run has no calls


def _step_point(step: int, m: dict) -> StepPoint:
    return StepPoint(
        step=step,
        version=int(m.get("version") or 0),
        reward_mean=m.get("reward_mean"),
        reward_mean_kept=m.get("reward_mean_kept"),
        staleness_mean=m.get("staleness_mean"),
        staleness_max=m.get("staleness_max"),
        samples=int(m.get("samples") or 0),
        tokens_trained=int(m.get("tokens_trained") or 0),
        step_time_s=m.get("step_time_s"),
        mismatch_mean_abs=m.get("mismatch_mean_abs"),
        mismatch_max_abs=m.get("mismatch_max_abs"),
        mismatch_alarmed=bool(m.get("mismatch_alarmed")),
        loss=m.get("loss"),
        echo_loss=m.get("echo_loss"),
    )


def bucket_width_s(span_s: float) -> int:
    """The smallest round width that cuts the span into at most TARGET_BUCKETS buckets."""
    for width in BUCKET_WIDTHS_S:
        if span_s / width <= TARGET_BUCKETS:
            return width
    return BUCKET_WIDTHS_S[-1]


def _epoch_s(column, dialect: str) -> ColumnElement:
    """Seconds since 1970 (UTC) of a timestamp column."""
    if dialect == "sqlite":  # stored as UTC text; julianday parses it
        return (func.julianday(column) - UNIX_EPOCH_JULIAN_DAY) * 86400.0
    return extract("epoch", column)


def _bucket(epoch: ColumnElement, first_s: float, width_s: int, dialect: str) -> ColumnElement:
    offset = (epoch - literal(first_s, Float)) / literal(float(width_s), Float)
    if dialect == "sqlite":  # offsets are >= 0, so truncation is floor (SQLite may lack floor())
        return cast(offset, Integer)
    return cast(func.floor(offset), Integer)


class Reports:
    """What `harnessrl report` plots, read in a few aggregate queries."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        dialect: str,
        listings: Listings,
        training: Training,
    ) -> None:
        self.sessions = sessions
        self.dialect = dialect
        self.listings = listings
        self.training = training

    async def gather(self, run: str) -> ReportData | None:
        """Everything the report plots; None when no run has that name."""
        run_id = await self.listings.run_id(run)
        if run_id is None:
            return None
        return ReportData(
            run,
            tuple(await self.step_points(run_id)),
            tuple(await self.reward_by_version(run_id)),
            await self.generation_throughput(run_id),
        )

    async def known_runs(self, limit: int = 20) -> list[str]:
        """The newest run names, for an error message about a run that does not exist."""
        return [r.name for r in await self.listings.runs(None, 0, limit, newest_first=True)]

    async def step_points(self, run_id: int) -> list[StepPoint]:
        return [_step_point(step, metrics) for step, metrics in await self.training.learner_steps(run_id)]

    async def reward_by_version(self, run_id: int) -> list[VersionReward]:
        """Mean and spread of the scored rollouts per policy version (``store.summary``'s one query)."""
        async with self.sessions() as session:
            rows = await rewards_by_version(session, run_id)
        # E[x^2] - E[x]^2 can dip below 0 by rounding when every reward is equal.
        return [
            VersionReward(
                r.version, r.scored, r.reward_mean, math.sqrt(max(0.0, r.reward_square_mean - r.reward_mean**2))
            )
            for r in rows
            if r.scored
        ]

    async def generation_throughput(self, run_id: int) -> GenerationThroughput | None:
        """Output tokens per time bucket: one aggregate for the span, one GROUP BY over buckets."""
        dialect = self.dialect
        epoch = _epoch_s(Call.created_at, dialect)
        span = (
            select(func.min(epoch), func.max(epoch))
            .select_from(Call)
            .join(Rollout, Rollout.id == Call.rollout_id)
            .where(Rollout.run_id == run_id)
        )
        async with self.sessions() as session:
            first, last = (await session.execute(span)).one()
            if first is None:
                return None
            width = bucket_width_s(float(last) - float(first))
            bucket = _bucket(epoch, float(first), width, dialect)
            per_call = (
                select(bucket.label("bucket"), Call.num_output_tokens.label("tokens"))
                .join(Rollout, Rollout.id == Call.rollout_id)
                .where(Rollout.run_id == run_id)
                .subquery()
            )
            # Grouped in an outer query: PostgreSQL would not match a GROUP BY expression whose bound
            # parameters differ from the SELECT's.
            query = (
                select(per_call.c.bucket, func.sum(per_call.c.tokens), func.count())
                .group_by(per_call.c.bucket)
                .order_by(per_call.c.bucket)
            )
            rows = (await session.execute(query)).all()
        n = int(rows[-1][0]) + 1
        tokens, calls = [0] * n, [0] * n  # buckets without calls stay 0: a stall is worth seeing
        for k, total, count in rows:
            tokens[int(k)], calls[int(k)] = int(total or 0), int(count)
        return GenerationThroughput(width, tuple(tokens), tuple(calls))
