"""Capture health: how faithfully a run's calls were recorded, per harness and model.

A call's prompt should extend the previous turn's prompt + output exactly (it then has a parent in the
call graph and one sample holds both turns). What breaks that, counted per (harness, model):
- **forks**: a root that diverged inside an earlier call's *sampled* tokens (``fork_of``; its
  ``drift_tokens`` were lost): the agent re-serialized what the model wrote;
- **false forks**: a later root that shares at least ``FALSE_FORK_TOKENS`` leading tokens with an earlier
  call of its rollout but diverged inside that call's *prompt*: the harness or the chat template
  rewrote history (dropped reasoning, re-rendered tool results), so one trajectory became two samples;
- **retried** calls (the client sent the same body again) and **side calls** (titles, summaries).

Reads the scalar columns of every call of the run, and the token ids only of the later roots that are
not forks (the suspects), rollout by rollout.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.arrays import unpack_ids
from store.calls import CallReads
from store.listings import is_main_call
from store.records import FALSE_FORK_TOKENS, CallTag
from store.tables import Call, Rollout


@dataclass
class CaptureHealth:
    harness: str | None
    model: str  # the public model name the agent asked for
    rollouts: set[int] = field(default_factory=set)
    calls: int = 0
    side_calls: int = 0  # tagged by the harness (titles, summaries)
    retried: int = 0  # superseded by the client's resend of the same body
    later_turns: int = 0  # main-loop calls after each rollout's first
    extending_turns: int = 0  # of those, extending an earlier call exactly (a parent)
    forks: int = 0
    drift_tokens: int = 0
    false_forks: int = 0

    @property
    def extension_rate(self) -> float | None:
        return self.extending_turns / self.later_turns if self.later_turns else None

    @property
    def side_call_share(self) -> float | None:
        return self.side_calls / self.calls if self.calls else None


def calls_of(run_id: int | None, policy: str | None) -> ColumnElement[bool]:
    """Which calls a report reads (a query joining ``Call`` and ``Rollout``): one run's, or every call one
    policy served, over its runs and live keys."""
    if (run_id is None) == (policy is None):
        raise ValueError("a report reads one run's calls or one policy's: give exactly one")
    return Rollout.run_id == run_id if run_id is not None else Call.policy == policy


def _shared(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common leading run of two id arrays."""
    length = min(len(a), len(b))
    differs = np.flatnonzero(a[:length] != b[:length])
    return int(differs[0]) if len(differs) else length


@dataclass(frozen=True)
class PolicyCall:
    """A call the policy sampled, whole, as a text pipeline would have had it."""

    harness: str | None
    model: str  # the public model name the agent asked for
    dialect: str
    request: dict  # the client's body, as received
    prompt_ids: list[int]  # what the engine saw
    output_ids: list[int]  # what it sampled


class Health:
    """A run's capture health and its latest policy calls."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], calls: CallReads) -> None:
        self.sessions = sessions
        self.calls = calls

    async def capture_health(self, run_id: int | None = None, *, policy: str | None = None) -> list[CaptureHealth]:
        """One row per (harness, model) of the run's calls (or every call ``policy`` served), sorted by
        harness then model."""
        query = (
            select(
                Rollout.id,
                Rollout.meta,
                Call.id,
                Call.model,
                Call.parent_id,
                Call.fork_of,
                Call.drift_tokens,
                Call.tags,
            )
            .join(Call, Call.rollout_id == Rollout.id)
            .where(calls_of(run_id, policy))
            .order_by(Rollout.id, Call.id)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        health: dict[tuple, CaptureHealth] = {}
        first_main: set[int] = set()
        suspects: dict[int, list[int]] = defaultdict(list)  # rollout -> later roots that are no fork
        row_of: dict[int, CaptureHealth] = {}  # suspect call -> its row
        for rollout_id, meta, call_id, model, parent_id, fork_of, drift, tags in rows:
            key = ((meta or {}).get("harness"), model)
            row = health.setdefault(key, CaptureHealth(*key))
            row.rollouts.add(rollout_id)
            row.calls += 1
            row.retried += CallTag.RETRIED in tags
            if tags:
                row.side_calls += not (set(tags) & {CallTag.RETRIED, CallTag.UNDELIVERED})
                continue
            row.forks += fork_of is not None
            row.drift_tokens += drift or 0
            if rollout_id not in first_main:
                first_main.add(rollout_id)
                continue
            row.later_turns += 1
            row.extending_turns += parent_id is not None
            if parent_id is None and fork_of is None:
                suspects[rollout_id].append(call_id)
                row_of[call_id] = row
        await self._count_false_forks(suspects, row_of)
        return [health[key] for key in sorted(health, key=lambda k: (k[0] or "", k[1]))]

    async def _count_false_forks(self, suspects: dict[int, list[int]], row_of: dict[int, CaptureHealth]) -> None:
        for rollout_id, call_ids in suspects.items():
            nodes = await self.calls.nodes(rollout_id)
            for n, node in enumerate(nodes):
                if node.call_id not in call_ids:
                    continue
                earlier = [np.concatenate([e.prompt_ids, e.output_ids]) for e in nodes[:n]]
                if any(_shared(node.prompt_ids, seq) >= FALSE_FORK_TOKENS for seq in earlier):
                    row_of[node.call_id].false_forks += 1

    async def latest_policy_calls(
        self, run_id: int | None, limit: int, *, policy: str | None = None
    ) -> list[PolicyCall]:
        """The run's (or ``policy``'s) ``limit`` latest main-loop calls the policy sampled, with whole
        requests and prompts."""
        query = (
            select(Call, Rollout.meta)
            .join(Rollout, Rollout.id == Call.rollout_id)
            .where(calls_of(run_id, policy), Call.source == "policy", is_main_call())
            .order_by(Call.id.desc())
            .limit(limit)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        await self.calls.read_whole([call for call, _ in rows])
        return [
            PolicyCall((meta or {}).get("harness"), c.model, c.dialect, c.request, unpack_ids(c.prompt_ids),
                       unpack_ids(c.output_ids))
            for c, meta in rows
        ]  # fmt: skip
