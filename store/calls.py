"""Reading recorded calls back (``store.calls``): whole requests and prompts rebuilt from their stored
deltas, call-graph nodes and ancestors, the samples' tokens, the API's pages of calls."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import prompt_delta, request_delta
from store.arrays import IDS, ids_array, logprobs_array, pack_ids, pack_logprobs, unpack_ids
from store.json_text import EncodedJSON
from store.listings import is_main_call, stored_call
from store.records import CallRecord, GraphNode, StoredCall
from store.roles import roles_array, stored_roles
from store.samples import Ancestor, CallNode, SampledMarks, prompt_marks
from store.tables import Call, utcnow


class CallReads:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], without_calls: set[int]):
        """``without_calls``: the store's rollouts created with no call recorded yet (read as empty)."""
        self.sessions = sessions
        self.without_calls = without_calls

    async def read_whole(self, calls: Sequence[Call]) -> None:
        """Detached calls as received: whole requests, prompts and prompt roles in place of the stored
        deltas (one query per rollout for the bases they need)."""
        stored_whole = {c.id for c in calls if not request_delta.is_delta(c.request) and not c.prompt_offset}
        for rollout_id, last in prompt_delta.last_ids(calls, lambda c: c.id not in stored_whole).items():
            query = select(Call.request, *prompt_delta.WITH_ROLES).where(Call.rollout_id == rollout_id, Call.id <= last)
            async with self.sessions() as session:
                rows = (await session.execute(query)).all()
            requests = request_delta.decode_all({row.id: row.request for row in rows})
            mine = [c for c in calls if c.rollout_id == rollout_id and c.id not in stored_whole]
            stored, wanted = [prompt_delta.as_stored(row) for row in rows], {c.id for c in mine}
            prompts, roles = prompt_delta.whole_prompts(stored, wanted), prompt_delta.whole_roles(stored, wanted)
            for call in mine:
                call.request, call.prompt_ids, call.prompt_offset = requests[call.id], prompts[call.id], 0
                call.prompt_roles = roles[call.id]

    async def graph_nodes(self, rollout_id: int, limit: int) -> list[GraphNode]:
        """The rollout's last ``limit`` calls as call-graph nodes, oldest first."""
        if rollout_id in self.without_calls:
            return []
        query = select(*prompt_delta.STORED_COLUMNS, Call.tags).where(Call.rollout_id == rollout_id).order_by(Call.id)
        async with self.sessions() as session:
            raw = (await session.execute(query)).all()
        rows, side = [prompt_delta.as_stored(row) for row in raw], {row.id: bool(row.tags) for row in raw}
        prompts = prompt_delta.whole_prompts(rows, {r.call_id for r in rows[-limit:]})
        return [
            GraphNode(r.call_id, len(prompts[r.call_id]) // 4, prompts[r.call_id] + r.output, side[r.call_id])
            for r in rows[-limit:]
        ]

    async def nodes(self, rollout_id: int) -> list[CallNode]:
        """Every call of the rollout with its tokens and prompt roles (no bodies), for building samples."""
        query = (
            select(*prompt_delta.WITH_ROLES, Call.output_logprobs, Call.policy_version, Call.tags)
            .where(Call.rollout_id == rollout_id)
            .order_by(Call.id)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        stored = [prompt_delta.as_stored(row) for row in rows]
        prompts, roles = prompt_delta.whole_prompts(stored), prompt_delta.whole_roles(stored)
        return [
            CallNode(
                r.id,
                r.parent_id,
                prompt := ids_array(prompts[r.id]),
                outputs := ids_array(r.output_ids),
                logprobs_array(r.output_logprobs, len(outputs)),
                r.policy_version,
                tuple(r.tags or ()),
                roles_array(roles[r.id], len(prompt)),
            )
            for r in rows
        ]

    async def ancestors(self, call_id: int) -> list[Ancestor]:
        """The calls above this one on its path, parent first (one recursive query)."""
        chain = select(Call.id, Call.parent_id).where(Call.id == call_id).cte("chain", recursive=True)
        chain = chain.union_all(select(Call.id, Call.parent_id).join(chain, Call.id == chain.c.parent_id))
        query = (
            select(
                Call.id, Call.num_prompt_tokens, Call.output_ids, Call.tags, Call.output_logprobs, Call.policy_version
            )
            .join(chain, Call.id == chain.c.id)
            .where(Call.id != call_id)
            .order_by(Call.id.desc())
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [
            Ancestor(
                r.id,
                r.num_prompt_tokens,
                outputs := ids_array(r.output_ids),
                tuple(r.tags or ()),
                logprobs_array(r.output_logprobs, len(outputs)),
                r.policy_version,
            )
            for r in rows
        ]

    async def prompt_marks(self, call: StoredCall) -> SampledMarks:
        """Who sampled each of ``call``'s prompt tokens: what the sample through it holds there."""
        prompt = np.asarray(call.prompt_ids, dtype=IDS)
        return prompt_marks(prompt, await self.ancestors(call.id), include_side=bool(call.tags))

    async def graph_stats(self, rollout_id: int) -> dict[str, int]:
        """Calls, roots, forks and drift tokens of a rollout's call graph."""
        query = select(
            func.count(Call.id),
            func.count(Call.id).filter(Call.parent_id.is_(None)),
            func.count(Call.fork_of),
            func.coalesce(func.sum(Call.drift_tokens), 0),
        ).where(Call.rollout_id == rollout_id)
        async with self.sessions() as session:
            calls, roots, forks, drift = (await session.execute(query)).one()
        return {"calls": calls, "roots": roots, "forks": forks, "drift_tokens": int(drift)}

    async def recent_outputs(self, rollout_id: int, limit: int) -> list[tuple[dict, list[int]]]:
        """The rollout's last chat answers (assistant message, sampled ids), oldest first."""
        if rollout_id in self.without_calls:
            return []
        query = (
            select(Call.response, Call.output_ids)
            .where(Call.rollout_id == rollout_id)
            .order_by(Call.id.desc())
            .limit(limit)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        outputs = []
        for response, output_ids in reversed(rows):
            message = ((response or {}).get("choices") or [{}])[0].get("message")
            if isinstance(message, dict):
                outputs.append((message, unpack_ids(output_ids)))
        return outputs

    async def get(self, call_id: int) -> StoredCall | None:
        """The call with its request as received and the engine's response."""
        async with self.sessions() as session:
            call = await session.get(Call, call_id)
        if call is None:
            return None
        await self.read_whole([call])
        return stored_call(call, bodies=True)

    async def last_main(self, rollout_id: int) -> StoredCall | None:
        """The rollout's last call that is not a side call (the agent's latest view of its task)."""
        query = select(Call).where(Call.rollout_id == rollout_id, is_main_call()).order_by(Call.id.desc()).limit(1)
        async with self.sessions() as session:
            call = (await session.scalars(query)).first()
        if call is None:
            return None
        await self.read_whole([call])
        return stored_call(call, bodies=True)

    async def answers_before(self, rollout_id: int, call_id: int) -> list[tuple[int, dict]]:
        """(id, engine response) of the rollout's calls before ``call_id``, oldest first (no token blobs)."""
        query = select(Call.id, Call.response).where(Call.rollout_id == rollout_id, Call.id < call_id).order_by(Call.id)
        async with self.sessions() as session:
            return [(row.id, row.response) for row in (await session.execute(query)).all()]

    async def page(self, rollout_id: int, after: int, limit: int) -> list[StoredCall]:
        """The rollout's calls after ``after``, by id, with their bodies."""
        query = select(Call).where(Call.rollout_id == rollout_id, Call.id > after).order_by(Call.id).limit(limit)
        async with self.sessions() as session:
            calls = list((await session.scalars(query)).all())
        await self.read_whole(calls)
        return [stored_call(call, bodies=True) for call in calls]


def call_row(record: CallRecord, request: dict) -> dict:
    """The row of table ``calls`` a record is stored as (``request``: as stored, maybe a delta); its JSON
    bodies encoded here, once, so their size counts against the rollout's budget (``store.stored_bytes``)."""
    return {
        "rollout_id": record.rollout_id,
        "dialect": record.dialect,
        "model": record.model,
        "engine_model": record.engine_model,
        "policy": record.policy,
        "policy_version": record.policy_version,
        "prompt_ids": prompt_delta.stored_ids(record.prompt_ids, record.prompt_offset),
        "prompt_offset": record.prompt_offset,
        "prompt_roles": stored_roles(record.prompt_roles, len(record.prompt_ids), record.prompt_offset),
        "output_ids": pack_ids(record.output_ids),
        "output_logprobs": pack_logprobs(record.output_logprobs),
        "source": record.source,
        "num_prompt_tokens": len(record.prompt_ids),
        "num_output_tokens": len(record.output_ids),
        "finish_reason": record.finish_reason,
        "request": EncodedJSON(request),
        "response": EncodedJSON(record.response),
        "tags": list(record.tags),
        "parent_id": record.parent_id,
        "fork_of": record.fork_of,
        "drift_tokens": record.drift_tokens,
        "latency_ms": record.latency_ms,
        "temperature": record.temperature,
        "top_p": record.top_p,
        "engine": record.engine,
        "queue_ms": record.queue_ms,
        "moved_from": record.moved_from,
        "adapter_digest": record.adapter_digest,
        "created_at": utcnow(),
    }
