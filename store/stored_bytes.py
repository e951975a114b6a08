"""A rollout's byte budget: what its recorded calls may take in the store, together.

An agent decides what it sends, and the store keeps what it sends (its history as deltas, its answers, the
token arrays): without a bound one rollout could fill the store's disk, 32 calls in flight at a time. So
each call is counted as it is inserted, by the bytes it takes there (its request as stored, its response,
its token arrays and prompt roles: ``stored_size``), and a call that would take its rollout past ``budget`` is not inserted:
``OverBudget`` names it, the others of its batch are committed, and what the rollout recorded before stays.
A rollout this process has not counted yet is summed from its rows once (a gateway restarted mid-rollout).

The adhoc run's rollout (calls without a token) has no budget: it takes every untokened caller's calls, with
no bound on their number either (``--require-token`` is how a gateway keeps untrusted agents off it).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Integer, Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from store.tables import Call

ROLLOUTS_COUNTED = 100_000  # rollouts whose count is kept; one forgotten is summed again when it calls next


class OverBudget(Exception):
    """Calls not inserted: each would have taken its rollout past its byte budget."""

    def __init__(self, refused: Sequence[object], messages: Sequence[str]):
        super().__init__(messages[0])
        self.refused = list(refused)  # the records refused (the writer fails exactly these)
        self.messages = list(messages)

    def refusal_for(self, record: object) -> OverBudget | None:
        """What ``record``'s caller is told (its own message), None when it was not refused."""
        message = next((m for r, m in zip(self.refused, self.messages) if r is record), None)
        return None if message is None else OverBudget([record], [message])


class BudgetSpent(Exception):
    """A rollout that has used its byte budget: no call of it can be recorded any more."""


def stored_size(row: dict) -> int:
    """The bytes a ``calls`` row takes (its JSON encoded already: ``store.calls.call_row``), less its
    fixed-size columns."""
    logprobs, roles = row["output_logprobs"], row.get("prompt_roles")
    return (
        row["request"].size
        + row["response"].size
        + len(row["prompt_ids"])
        + len(row["output_ids"])
        + (len(logprobs) if logprobs is not None else 0)
        + (len(roles) if roles is not None else 0)
    )


class _utf8_length(FunctionElement):
    """A text's length in bytes (``length`` counts characters): ``octet_length``, which SQLite has only
    since 3.43, there the length of the text as a blob."""

    type = Integer()
    inherit_cache = True


@compiles(_utf8_length)
def _octet_length(element, compiler, **kw) -> str:
    return f"octet_length({compiler.process(element.clauses, **kw)})"


@compiles(_utf8_length, "sqlite")
def _blob_length(element, compiler, **kw) -> str:
    return f"length(CAST({compiler.process(element.clauses, **kw)} AS BLOB))"


# The same sum in SQL, for a rollout's rows recorded before this process counted them.
_STORED_SQL_SIZE = (
    _utf8_length(cast(Call.request, Text))
    + _utf8_length(cast(Call.response, Text))
    + func.length(Call.prompt_ids)
    + func.length(Call.output_ids)
    + func.coalesce(func.length(Call.output_logprobs), 0)
    + func.coalesce(func.length(Call.prompt_roles), 0)
)


class StoredBytes:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], without_calls: set[int], budget: int | None):
        """``without_calls``: the store's rollouts created with no call yet (counted as 0, not summed);
        ``budget``: bytes per rollout (None: no bound, and nothing is counted)."""
        self._sessions, self._without_calls = sessions, without_calls
        self.budget = budget or None
        self.unbounded: set[int] = set()  # rollouts without a budget (the adhoc run's)
        self._used: dict[int, int] = {}  # rollout id -> bytes its recorded calls take

    async def check(self, rollout_id: int) -> None:
        """BudgetSpent when the rollout has used its budget (a call's first step: no engine time is spent
        on a call that could not be recorded)."""
        if self.budget is None or rollout_id in self.unbounded:
            return
        used = self._used.get(rollout_id)
        if used is None:
            used = await self._count(rollout_id)
        if used >= self.budget:
            raise BudgetSpent(self._spent(rollout_id, used))

    async def take(self, records: Sequence, sizes: Sequence[int]) -> None:
        """Count ``records`` (CallRecords about to be inserted, ``sizes`` their ``stored_size``s) against
        their rollouts' budgets; OverBudget, having counted none, when some would go past theirs."""
        if self.budget is None:
            return
        for record in records:
            if record.rollout_id not in self._used:
                await self._count(record.rollout_id)
        taken: list[tuple[int, int]] = []
        refused, messages = [], []
        for record, size in zip(records, sizes):  # no await from here on: concurrent batches count in turn
            rollout_id, used = record.rollout_id, self._used.get(record.rollout_id, 0)
            if rollout_id not in self.unbounded and used + size > self.budget:
                refused.append(record)
                messages.append(self._refusal(rollout_id, used, size))
                continue
            self._used[rollout_id] = used + size
            taken.append((rollout_id, size))
        if refused:
            self.give_back(taken)
            raise OverBudget(refused, messages)

    def give_back(self, taken: Sequence[tuple[int, int]]) -> None:
        """Uncount (rollout id, bytes) pairs whose insert failed."""
        if self.budget is None:
            return
        for rollout_id, size in taken:
            if rollout_id in self._used:
                self._used[rollout_id] -= size

    async def _count(self, rollout_id: int) -> int:
        if rollout_id in self._without_calls:
            used = 0
        else:
            query = select(func.coalesce(func.sum(_STORED_SQL_SIZE), 0)).where(Call.rollout_id == rollout_id)
            async with self._sessions() as session:
                used = int((await session.execute(query)).scalar_one())
        if len(self._used) >= ROLLOUTS_COUNTED:
            self._used.pop(next(iter(self._used)))  # the longest counted
        # A count taken meanwhile (by a concurrent call) stays: it may hold an insert this sum missed.
        return self._used.setdefault(rollout_id, used)

    def _spent(self, rollout_id: int, used: int) -> str:
        return (
            f"rollout {rollout_id} has recorded {_shown(used)} of calls, its byte budget of {_shown(self.budget)} "
            "(serve --rollout-max-stored-mib): no more of its calls can be recorded; what it recorded is kept. "
            "End this rollout and start a new one"
        )

    def _refusal(self, rollout_id: int, used: int, size: int) -> str:
        return (
            f"this call ({_shown(size)} as stored) would take rollout {rollout_id} past its byte budget of "
            f"{_shown(self.budget)} (serve --rollout-max-stored-mib; {_shown(used)} recorded): it was not recorded, "
            "and what the rollout recorded before is kept. Send less (the history the store keeps grows with "
            "each call), or end this rollout and start a new one"
        )


def _shown(size: int) -> str:
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
