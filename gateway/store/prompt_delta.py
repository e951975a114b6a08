"""Prompt ids stored as what each call adds beyond its parent, so a rollout's token bytes grow linearly
in turns (the requests' twin is ``request_delta``).

A call's parent in the call graph is the earlier call of its rollout whose prompt + output is a token
prefix of its prompt (``gateway.callgraph``). Such a call stores ``prompt_offset`` (that prefix's length
in tokens) and only the prompt ids from there on; the prefix is read back from the parent. A root, a
call written without a link and every call written before revision 0011 store their whole prompt
(offset 0). An agent cannot make a call lean on tokens that are not its parent's: the offset is set by
the gateway from an exact prefix match, never from what the client sent.

Readers get whole prompts: ``whole_prompts`` rebuilds them from a rollout's stored rows, parents first
(a parent's id is always lower than its children's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.store.arrays import pack_ids
from gateway.store.tables import Call

STORED_COLUMNS = (Call.id, Call.parent_id, Call.prompt_offset, Call.prompt_ids, Call.output_ids)


@dataclass(frozen=True)
class StoredPrompt:
    call_id: int
    parent_id: int | None
    offset: int  # leading prompt tokens that are the parent's prompt + output, not stored with this call
    stored: bytes  # int32 LE: the prompt from ``offset`` on
    output: bytes  # int32 LE: the call's sampled ids (a child's prefix runs on into them)


def stored_ids(prompt_ids: Sequence[int], offset: int) -> bytes:
    """What a call stores of its prompt: the ids past its parent's prompt + output."""
    return pack_ids(prompt_ids[offset:])


def whole_prompts(rows: Iterable[StoredPrompt]) -> dict[int, bytes]:
    """Each call's whole prompt (int32 LE) from the stored rows of its rollout, its ancestors included.

    Cost: one pass in id order; each call copies its parent's prompt + output once, so time and memory
    are those of the whole prompts returned."""
    by_id = {row.call_id: row for row in rows}
    whole: dict[int, bytes] = {}
    for call_id in sorted(by_id):
        row = by_id[call_id]
        if row.offset == 0:
            whole[call_id] = row.stored
            continue
        if row.parent_id not in whole:
            raise LookupError(f"call {call_id}'s prompt leans on call {row.parent_id}, which was not read with it")
        prefix = (whole[row.parent_id] + by_id[row.parent_id].output)[: row.offset * 4]
        whole[call_id] = prefix + row.stored
    return whole


def as_stored(row) -> StoredPrompt:
    """A row of ``STORED_COLUMNS`` (or an ORM Call) as a StoredPrompt."""
    return StoredPrompt(row.id, row.parent_id, row.prompt_offset or 0, row.prompt_ids, row.output_ids)


async def rollout_prompts(session: AsyncSession, rollout_id: int, last_id: int | None = None) -> dict[int, bytes]:
    """Whole prompts of a rollout's calls up to ``last_id`` (all of them with None): one query."""
    query = select(*STORED_COLUMNS).where(Call.rollout_id == rollout_id)
    if last_id is not None:
        query = query.where(Call.id <= last_id)
    return whole_prompts(as_stored(row) for row in (await session.execute(query)).all())


async def fill_whole_prompts(session: AsyncSession, calls: Sequence) -> dict[int, bytes]:
    """Whole prompts of ``calls`` (ORM objects or rows with id, rollout_id, prompt_offset, prompt_ids):
    those stored whole as they are, the others rebuilt with one query per rollout."""
    whole = {call.id: call.prompt_ids for call in calls if not call.prompt_offset}
    last: dict[int, int] = {}
    for call in calls:
        if call.prompt_offset:
            last[call.rollout_id] = max(last.get(call.rollout_id, 0), call.id)
    for rollout_id, last_id in last.items():
        rebuilt = await rollout_prompts(session, rollout_id, last_id)
        whole.update((call.id, rebuilt[call.id]) for call in calls if call.id in rebuilt and call.prompt_offset)
    return whole
