"""REST routes: rollout identity and reading what was recorded."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from gateway.api.protocol import (
    AddReward,
    CallDetail,
    CallView,
    CreateRollout,
    FinishRollout,
    GraphStats,
    GroupView,
    Page,
    RolloutCreated,
    RolloutSummary,
    RolloutView,
    RunView,
    SampleList,
    SampleView,
)
from gateway.errors import Conflict, NotFound
from gateway.state import AdminStateDep, StateDep
from gateway.store.arrays import unpack_ids, unpack_logprobs
from gateway.store.samples import build_samples
from gateway.store.store import RolloutEnded, RunConflict
from gateway.store.tables import Call

Limit = Annotated[int, Query(ge=1, le=1000)]
After = Annotated[int, Query(ge=0, description="return items with id greater than this cursor")]


def _call_fields(call: Call) -> dict:
    return dict(
        id=call.id, rollout_id=call.rollout_id, parent_id=call.parent_id, fork_of=call.fork_of,
        drift_tokens=call.drift_tokens, dialect=call.dialect,
        model=call.model, engine_model=call.engine_model, policy_version=call.policy_version,
        prompt_ids=unpack_ids(call.prompt_ids), output_ids=unpack_ids(call.output_ids),
        output_logprobs=unpack_logprobs(call.output_logprobs), finish_reason=call.finish_reason,
        tags=call.tags, latency_ms=call.latency_ms, created_at=call.created_at,
    )


def _base_url(request: Request, public_url: str | None, token: str) -> str:
    root = (public_url or str(request.base_url)).rstrip("/")
    return f"{root}/r/{token}/v1"


async def create_rollout(body: CreateRollout, request: Request, state: AdminStateDep) -> RolloutCreated:
    try:
        identity = await state.store.create_rollout(body.run, body.task, body.group, body.meta, body.capture,
                                                    body.group_size)
    except RunConflict as exc:
        raise Conflict(str(exc), param="capture") from None
    return RolloutCreated(id=identity.rollout_id, token=identity.token,
                          base_url=_base_url(request, state.settings.public_url, identity.token))


async def get_rollout(rollout_id: int, state: StateDep) -> RolloutView:
    found = await state.store.get_rollout(rollout_id)
    if found is None:
        raise NotFound(f"rollout {rollout_id} not found")
    rollout, run, task, group, num_calls = found
    graph = GraphStats(**await state.store.graph_stats(rollout_id))
    return RolloutView(id=rollout.id, run=run, task=task, group=group, status=rollout.status,
                       reward=rollout.reward, rewards=rollout.rewards or {}, error=rollout.error, meta=rollout.meta,
                       num_calls=num_calls, graph=graph, created_at=rollout.created_at,
                       finished_at=rollout.finished_at)


async def add_rollout_reward(rollout_id: int, body: AddReward, state: AdminStateDep) -> RolloutView:
    if not await state.store.add_reward(rollout_id, body.name, body.value):
        raise NotFound(f"rollout {rollout_id} not found")
    return await get_rollout(rollout_id, state)


async def finish_rollout(rollout_id: int, body: FinishRollout, state: AdminStateDep) -> RolloutView:
    try:
        found = await state.store.end_rollout(rollout_id, body.status, body.error, body.rewards)
    except RolloutEnded as exc:
        raise Conflict(str(exc)) from None
    if not found:
        raise NotFound(f"rollout {rollout_id} not found")
    return await get_rollout(rollout_id, state)


async def list_rollouts(state: StateDep, run: str | None = None, task: str | None = None,
                        status: str | None = None, after: After = 0, limit: Limit = 100) -> Page[RolloutSummary]:
    rows = await state.store.list_rollouts(run, task, status, after, limit)
    return Page[RolloutSummary](
        data=[RolloutSummary(id=r.id, run=run_name, task=task_name, group=group, status=r.status,
                             reward=r.reward, error=r.error, meta=r.meta, created_at=r.created_at,
                             finished_at=r.finished_at) for r, run_name, task_name, group in rows],
        next_cursor=rows[-1][0].id if len(rows) == limit else None,
    )


async def list_groups(state: StateDep, run: str | None = None, status: str | None = None,
                      after: After = 0, limit: Limit = 100) -> Page[GroupView]:
    rows = await state.store.list_groups(run, status, after, limit)
    return Page[GroupView](
        data=[GroupView(id=g.id, run=run_name, task=task, name=g.name, status=g.status, size=g.size,
                        ready_at=g.ready_at, created_at=g.created_at) for g, run_name, task in rows],
        next_cursor=rows[-1][0].id if len(rows) == limit else None,
    )


async def list_rollout_samples(rollout_id: int, state: StateDep, include_side: bool = False) -> SampleList:
    found = await state.store.get_rollout(rollout_id)
    if found is None:
        raise NotFound(f"rollout {rollout_id} not found")
    samples = build_samples(await state.store.call_nodes(rollout_id), include_side)
    return SampleList(rollout_id=rollout_id, reward=found[0].reward, data=[
        SampleView(call_ids=list(s.call_ids), num_turns=s.num_turns, input_ids=s.input_ids.tolist(),
                   loss_mask=s.loss_mask.tolist(), old_logprobs=s.old_logprobs.tolist(),
                   policy_versions=s.policy_versions.tolist())
        for s in samples])


async def list_rollout_calls(rollout_id: int, state: StateDep, after: After = 0,
                             limit: Limit = 100) -> Page[CallView]:
    if await state.store.get_rollout(rollout_id) is None:
        raise NotFound(f"rollout {rollout_id} not found")
    calls = await state.store.list_calls(rollout_id, after, limit)
    return Page[CallView](data=[CallView(**_call_fields(c)) for c in calls],
                          next_cursor=calls[-1].id if len(calls) == limit else None)


async def get_call(call_id: int, state: StateDep) -> CallDetail:
    call = await state.store.get_call(call_id)
    if call is None:
        raise NotFound(f"call {call_id} not found")
    return CallDetail(**_call_fields(call), request=call.request, response=call.response)


async def list_runs(state: StateDep, after: After = 0, limit: Limit = 100) -> Page[RunView]:
    runs = await state.store.list_runs(after, limit)
    return Page[RunView](
        data=[RunView(id=r.id, name=r.name, config=r.config, created_at=r.created_at) for r in runs],
        next_cursor=runs[-1].id if len(runs) == limit else None,
    )


def create_router() -> APIRouter:
    router = APIRouter(prefix="/api", tags=["trajectories"])
    router.add_api_route("/rollouts", create_rollout, methods=["POST"], status_code=201,
                         response_model=RolloutCreated)
    router.add_api_route("/rollouts/{rollout_id}", get_rollout, methods=["GET"], response_model=RolloutView)
    router.add_api_route("/rollouts/{rollout_id}/calls", list_rollout_calls, methods=["GET"],
                         response_model=Page[CallView])
    router.add_api_route("/rollouts/{rollout_id}/reward", add_rollout_reward, methods=["POST"],
                         response_model=RolloutView)
    router.add_api_route("/rollouts/{rollout_id}/finish", finish_rollout, methods=["POST"],
                         response_model=RolloutView)
    router.add_api_route("/rollouts", list_rollouts, methods=["GET"], response_model=Page[RolloutSummary])
    router.add_api_route("/groups", list_groups, methods=["GET"], response_model=Page[GroupView])
    router.add_api_route("/rollouts/{rollout_id}/samples", list_rollout_samples, methods=["GET"],
                         response_model=SampleList)
    router.add_api_route("/calls/{call_id}", get_call, methods=["GET"], response_model=CallDetail)
    router.add_api_route("/runs", list_runs, methods=["GET"], response_model=Page[RunView])
    return router
