"""REST routes for recorded calls: listings (tokens on request) and one call, decoded."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Query

from gateway.api.params import After, Int64, Limit, page_of
from gateway.api.protocol import CallDetail, CallMismatchView, CallView, Page
from gateway.decoding import TokenDecoder
from gateway.errors import NotFound
from gateway.state import StateDep
from store.arrays import logprobs_or_none
from store.listings import CallFilter
from store.mismatch import CallMismatchRecord
from store.records import StoredCall
from store.samples import SampledMarks

Tokens = Annotated[
    bool, Query(description="false leaves prompt_ids, prompt_roles, output_ids and output_logprobs empty")
]


def call_view(call: StoredCall) -> CallView:
    """A call as its wire model (empty token arrays where the store read none)."""
    return CallView.model_validate(call, from_attributes=True)


async def list_calls(
    state: StateDep,
    run: str | None = None,
    rollout_id: Int64 | None = None,
    tag: str | None = None,
    finish_reason: str | None = None,
    dialect: str | None = None,
    after: After = 0,
    limit: Limit = 100,
) -> Page[CallView]:
    where = CallFilter(run=run, rollout_id=rollout_id, tag=tag, finish_reason=finish_reason, dialect=dialect)
    rows = await state.store.listings.calls(where, after, limit, tokens=False)
    return page_of([call_view(r) for r in rows], limit)


async def list_rollout_calls(
    rollout_id: Int64,
    state: StateDep,
    tag: str | None = None,
    finish_reason: str | None = None,
    tokens: Tokens = True,
    after: After = 0,
    limit: Limit = 100,
) -> Page[CallView]:
    if await state.store.get_rollout(rollout_id) is None:
        raise NotFound(f"rollout {rollout_id} not found")
    where = CallFilter(rollout_id=rollout_id, tag=tag, finish_reason=finish_reason)
    rows = await state.store.listings.calls(where, after, limit, tokens=tokens)
    return page_of([call_view(r) for r in rows], limit)


async def get_call(call_id: Int64, state: StateDep, decode: bool = False) -> CallDetail:
    call = await state.store.calls.get(call_id)
    if call is None:
        raise NotFound(f"call {call_id} not found")
    detail = CallDetail(**call_view(call).model_dump(), request=call.request, response=call.response)
    detail.mismatch = mismatch_view(await state.store.mismatch.of_call(call_id))
    if decode:
        _mark_prompt(detail, await state.store.calls.prompt_marks(call))
        decoder = await state.decoder()
        if decoder is not None:
            text = await asyncio.to_thread(_decoded, decoder, detail.prompt_ids, detail.output_ids)
            for name, value in text.items():
                setattr(detail, name, value)
    return detail


def mismatch_view(record: CallMismatchRecord | None) -> CallMismatchView | None:
    if record is None:
        return None
    fields = {k: v for k, v in vars(record).items() if k not in ("call_id", "deltas")}
    return CallMismatchView(**fields, deltas=logprobs_or_none(record.deltas))


def _mark_prompt(detail: CallDetail, marks: SampledMarks) -> None:
    """The prompt's mask, logprobs and versions: what the sample through this call holds there."""
    sampled = marks.mask.astype(bool)
    detail.prompt_mask = marks.mask.tolist()
    # null where nothing was sampled, and where a teacher wrote the token (NaN: no sampler log-prob)
    detail.prompt_logprobs = [lp if keep else None for lp, keep in zip(logprobs_or_none(marks.logprobs), sampled)]
    detail.prompt_versions = marks.versions.tolist()


def _decoded(decoder: TokenDecoder, prompt_ids: list[int], output_ids: list[int]) -> dict:
    return {
        "prompt_text": decoder.decode(prompt_ids),
        "output_text": decoder.decode(output_ids),
        "prompt_pieces": decoder.pieces(prompt_ids),
        "output_pieces": decoder.pieces(output_ids),
    }
