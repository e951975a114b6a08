"""Prompt ids stored as what each call adds beyond its parent, so a rollout's token bytes grow linearly
in turns (the requests' twin is ``request_delta``).

A call's parent in the call graph is the earlier call of its rollout whose prompt + output is a token
prefix of its prompt (``gateway.recording.callgraph``). Such a call stores ``prompt_offset`` (that prefix's length
in tokens) and only the prompt ids from there on; the prefix is read back from the parent. A root, a
call written without a link and every call written before revision 0011 store their whole prompt
(offset 0). An agent cannot make a call lean on tokens that are not its parent's: the offset is set by
the gateway from an exact prefix match, never from what the client sent.

Readers get whole prompts: ``whole_prompts`` rebuilds them from a rollout's stored rows, parents first
(a parent's id is always lower than its children's). A prompt's token roles (``store.roles``) are stored
the same way, and ``whole_roles`` rebuilds them: a child's prefix is its parent's whole prompt roles,
then ``ASSISTANT`` over the parent's output; unknown (None) where a call along the chain stored none.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from store.arrays import pack_ids
from store.roles import ASSISTANT_BYTE
from store.tables import Call

STORED_COLUMNS = (Call.id, Call.parent_id, Call.prompt_offset, Call.prompt_ids, Call.output_ids)
WITH_ROLES = (*STORED_COLUMNS, Call.prompt_roles)  # for readers of whole prompt roles too


@dataclass(frozen=True)
class StoredPrompt:
    call_id: int
    parent_id: int | None
    offset: int  # leading prompt tokens that are the parent's prompt + output, not stored with this call
    stored: bytes  # int32 LE: the prompt from ``offset`` on
    output: bytes  # int32 LE: the call's sampled ids (a child's prefix runs on into them)
    roles: bytes | None = None  # uint8 TokenRoles of the prompt from ``offset`` on; None: unknown (or not read)


def stored_ids(prompt_ids: Sequence[int], offset: int) -> bytes:
    """What a call stores of its prompt: the ids past its parent's prompt + output."""
    return pack_ids(prompt_ids[offset:])


def whole_prompts(rows: Iterable[StoredPrompt], wanted: Collection[int] | None = None) -> dict[int, bytes]:
    """The whole prompts (int32 LE) of the calls in ``wanted`` (every row's with None), from the stored
    rows of their rollout, their ancestors included.

    One pass in id order. A whole prompt is held only while a later row still leans on it or when it
    is wanted, so memory is that of the answer plus the chains' frontier, not of every prompt rebuilt
    (a 2,000-turn rollout read for its last calls holds a few prompts, not 2,000)."""
    return _rebuilt(rows, wanted, lambda row: row.stored, lambda whole, parent: whole + parent.output, 4)


def whole_roles(rows: Iterable[StoredPrompt], wanted: Collection[int] | None = None) -> dict[int, bytes | None]:
    """The whole prompt roles (uint8 TokenRoles) of the calls in ``wanted``, as ``whole_prompts`` rebuilds
    their ids: a child's prefix is its parent's whole roles then ``ASSISTANT`` over the parent's output.
    None for a call whose roles, or those of a call along its chain, are unknown."""
    return _rebuilt(
        rows, wanted, lambda row: row.roles, lambda whole, parent: whole + ASSISTANT_BYTE * (len(parent.output) // 4), 1
    )


def _rebuilt(
    rows: Iterable[StoredPrompt],
    wanted: Collection[int] | None,
    own: Callable[[StoredPrompt], bytes | None],
    continued: Callable[[bytes, StoredPrompt], bytes],
    width: int,
) -> dict[int, bytes | None]:
    """Whole per-token arrays (``width`` bytes a token) from each row's ``own`` part past its offset and its
    parent's whole array ``continued`` over the parent's output; None where a part on the chain is None."""
    by_id = {row.call_id: row for row in rows}
    last_child = {by_id[i].parent_id: i for i in sorted(by_id) if by_id[i].offset}
    held: dict[int, bytes | None] = {}  # whole arrays a later row leans on
    found: dict[int, bytes | None] = {}
    for call_id in sorted(by_id):
        row = by_id[call_id]
        whole = own(row)
        if row.offset:
            if row.parent_id not in held:
                raise LookupError(f"call {call_id}'s prompt leans on call {row.parent_id}, which was not read with it")
            base = held[row.parent_id]
            if base is None or whole is None:
                whole = None
            else:
                whole = continued(base, by_id[row.parent_id])[: row.offset * width] + whole
            if last_child[row.parent_id] == call_id:
                del held[row.parent_id]
        if call_id in last_child:
            held[call_id] = whole
        if wanted is None or call_id in wanted:
            found[call_id] = whole
    return found


def as_stored(row) -> StoredPrompt:
    """A row of ``STORED_COLUMNS`` or ``WITH_ROLES`` (or an ORM Call) as a StoredPrompt (roles None
    when not read)."""
    roles = getattr(row, "prompt_roles", None)
    return StoredPrompt(row.id, row.parent_id, row.prompt_offset or 0, row.prompt_ids, row.output_ids, roles)


def last_ids(calls: Iterable, needs) -> dict[int, int]:
    """Per rollout, the highest id of ``calls`` for which ``needs(call)``: how far its rows are read."""
    last: dict[int, int] = {}
    for call in calls:
        if needs(call):
            last[call.rollout_id] = max(last.get(call.rollout_id, 0), call.id)
    return last


async def fill_whole(session: AsyncSession, calls: Sequence) -> tuple[dict[int, bytes], dict[int, bytes | None]]:
    """Whole prompts and prompt roles of ``calls`` (ORM objects or rows with id, rollout_id, prompt_offset,
    prompt_ids, prompt_roles): those stored whole as they are, the others rebuilt with one query per rollout."""
    whole = {call.id: call.prompt_ids for call in calls if not call.prompt_offset}
    roles = {call.id: call.prompt_roles for call in calls if not call.prompt_offset}
    for rollout_id, last_id in last_ids(calls, lambda call: call.prompt_offset).items():
        query = select(*WITH_ROLES).where(Call.rollout_id == rollout_id, Call.id <= last_id)
        wanted = {call.id for call in calls if call.rollout_id == rollout_id and call.prompt_offset}
        rows = [as_stored(row) for row in (await session.execute(query)).all()]
        whole.update(whole_prompts(rows, wanted))
        roles.update(whole_roles(rows, wanted))
    return whole, roles
