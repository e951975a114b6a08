"""REST routes: rollout identity and reading what was recorded."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Request

from gateway.api import calls, live, policies, runs
from gateway.api.conversation import rollout_conversation
from gateway.api.params import Int64, page_of
from gateway.api.protocol import (
    REQUEST_ID,
    AddReward,
    CallDetail,
    CallView,
    CaptureHealthView,
    Conversation,
    CreateRollout,
    EndRollout,
    GraphStats,
    GroupView,
    LearnerStepView,
    MismatchSummaryView,
    Page,
    RolloutCreated,
    RolloutSummary,
    RolloutView,
    RunSummary,
    RunView,
    SampleList,
    SampleView,
)
from gateway.api.rollout_query import PageQuery, RolloutFilterQuery
from gateway.errors import Conflict, InvalidRequest, NotFound
from gateway.policy.pins import read_pin, requested_version
from gateway.state import AdminStateDep, GatewayState, StateDep
from store.arrays import logprobs_or_none
from store.policies import run_policy
from store.records import AgentReport, StoredRollout
from store.rewards import GroupClosed, InvalidReward, RolloutEnded
from store.roles import role_runs
from store.rollout_asks import AskedSettings, PolicyPin
from store.rollout_requests import RequestConflict
from store.run_settings import RunConflict
from store.samples import build_samples

# A client's id for a create request, as the header HTTP APIs use for idempotent retries.
IdempotencyKey = Annotated[
    str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200, pattern=REQUEST_ID)
]


def _base_url(request: Request, public_url: str | None, token: str) -> str:
    root = (public_url or str(request.base_url)).rstrip("/")
    return f"{root}/r/{token}/v1"


async def create_rollout(
    body: CreateRollout, request: Request, state: AdminStateDep, idempotency_key: IdempotencyKey = None
) -> RolloutCreated:
    request_id = _request_id(body.request_id, idempotency_key)
    sampling = body.sampling.model_dump(exclude_none=True) if body.sampling else None
    pinned_policy, pinned = await _pinned_version(body.policy, body.run, body.run_policy, state)
    settings = AskedSettings(body.capture, sampling, body.run_policy)
    pin = PolicyPin(pinned, pinned_policy, body.policy)
    try:
        identity = await state.store.create_rollout(
            body.run, body.task, body.group, body.meta, body.group_size, request_id, settings, pin
        )
    except RunConflict as exc:
        raise Conflict(str(exc), param=exc.param) from None
    except RequestConflict as exc:
        raise Conflict(str(exc), param="request_id") from None
    except GroupClosed as exc:
        raise Conflict(str(exc), param="group") from None
    return RolloutCreated(
        id=identity.rollout_id,
        token=identity.token,
        base_url=_base_url(request, state.settings.public_url, identity.token),
    )


async def _pinned_version(
    pin: str | None, run: str, run_policy: str | None, state: GatewayState
) -> tuple[str | None, int | None]:
    """The policy and version a create request pins (loaded into the engine now if it is not), or
    (None, None). A pin without a policy names the run's (as asked, or as the run keeps it); a pin
    naming a policy the server does not know is a 404 naming the known ones."""
    if pin is None:
        return None, None
    parsed = read_pin(pin)
    name = parsed.policy or run_policy or await _run_policy(run, state)
    registry = await state.known_policy(name) if parsed.policy else await state.ensure_policy(name)
    version = requested_version(parsed, registry)
    await state.ensure_version(name, version)
    return name, version


async def _run_policy(run: str, state: GatewayState) -> str:
    found = await state.store.listings.run(run)
    return run_policy(found.config if found else None)


async def get_rollout(rollout_id: Int64, state: StateDep) -> RolloutView:
    found = await state.store.get_rollout(rollout_id)
    if found is None:
        raise NotFound(f"rollout {rollout_id} not found")
    rollout, run, task, group, num_calls = found
    graph = GraphStats(**await state.store.calls.graph_stats(rollout_id))
    answered, refused, last_refusal = state.books.refusals.of(rollout_id)
    return RolloutView(
        id=rollout.id,
        run=run,
        task=task,
        group=group,
        group_id=rollout.group_id,
        status=rollout.status,
        reward=rollout.reward,
        rewards=rollout.rewards or {},
        reward_details=rollout.reward_details or {},
        error=rollout.error,
        meta=rollout.meta,
        num_calls=num_calls,
        graph=graph,
        created_at=rollout.created_at,
        pinned_version=rollout.pinned_version,
        policy=rollout.policy,
        finished_at=rollout.finished_at,
        # the measured value once it ended; the gateway's clock (in-flight calls included) while it runs
        engine_s=rollout.engine_s if rollout.engine_s is not None else state.books.engine_clock.seconds(rollout_id),
        agent_exit_code=rollout.agent_exit_code,
        agent_log=rollout.agent_log,
        answered_calls=answered,
        refused_calls=refused,
        last_refusal=last_refusal,
    )


def _request_id(in_body: str | None, header: str | None) -> str | None:
    if in_body is not None and header is not None and in_body != header:
        raise InvalidRequest("request_id and the Idempotency-Key header differ: send one of them", param="request_id")
    return in_body or header


async def add_rollout_reward(rollout_id: Int64, body: AddReward, state: AdminStateDep) -> RolloutView:
    try:
        found = await state.store.add_reward(rollout_id, body.name, body.value)
    except InvalidReward as exc:
        raise InvalidRequest(str(exc), param="value") from None
    except RolloutEnded as exc:
        raise Conflict(str(exc)) from None
    if not found:
        raise NotFound(f"rollout {rollout_id} not found")
    return await get_rollout(rollout_id, state)


async def end_rollout(rollout_id: Int64, body: EndRollout, state: AdminStateDep) -> RolloutView:
    try:
        found = await state.store.end_rollout(
            rollout_id,
            body.status,
            body.error,
            body.rewards,
            body.reward_details,
            AgentReport(body.agent_exit_code, body.agent_log),
            state.books.engine_clock.seconds(rollout_id),
        )
    except InvalidReward as exc:
        raise InvalidRequest(str(exc), param="rewards") from None
    except RolloutEnded as exc:
        raise Conflict(str(exc)) from None
    if not found:
        raise NotFound(f"rollout {rollout_id} not found")
    state.books.engine_clock.forget(rollout_id)
    state.books.refusals.forget(rollout_id)
    if state.trace_export is not None:
        state.trace_export.rollout_ended(rollout_id)
    return await get_rollout(rollout_id, state)


def rollout_summary(rollout: StoredRollout, run: str, task: str, group: str) -> RolloutSummary:
    """A rollout as listings show it (``GET /api/rollouts``, ``harnessrl ls rollouts``)."""
    r = rollout
    return RolloutSummary(
        id=r.id, run=run, task=task, group=group, group_id=r.group_id, status=r.status, reward=r.reward,
        error=r.error, meta=r.meta, created_at=r.created_at, finished_at=r.finished_at,
        pinned_version=r.pinned_version,
        policy=r.policy,
    )  # fmt: skip


async def list_rollouts(state: StateDep, where: RolloutFilterQuery, page: PageQuery) -> Page[RolloutSummary]:
    low, high = where.reward_min, where.reward_max
    if low is not None and high is not None and low > high:
        raise InvalidRequest(f"reward_min {low} is above reward_max {high}", param="reward_min")
    rows = await state.store.listings.rollouts(where, page.after, page.limit)
    return page_of(
        [rollout_summary(r, run_name, task_name, group) for r, run_name, task_name, group in rows],
        page.limit,
    )


async def list_rollout_samples(
    rollout_id: Int64, state: StateDep, include_side: bool = False, decode: bool = False
) -> SampleList:
    found = await state.store.get_rollout(rollout_id)
    if found is None:
        raise NotFound(f"rollout {rollout_id} not found")
    samples = build_samples(await state.store.calls.nodes(rollout_id), include_side)
    decoder = await state.decoder() if decode else None
    pieces = (
        [None] * len(samples)
        if decoder is None
        else await asyncio.to_thread(lambda: [decoder.pieces(s.input_ids.tolist()) for s in samples])
    )
    return SampleList(
        rollout_id=rollout_id,
        reward=found[0].reward,
        data=[
            SampleView(
                call_ids=list(s.call_ids),
                num_turns=s.num_turns,
                input_ids=s.input_ids.tolist(),
                loss_mask=s.loss_mask.tolist(),
                old_logprobs=logprobs_or_none(s.old_logprobs),
                policy_versions=s.policy_versions.tolist(),
                roles=role_runs(s.roles),
                pieces=p,
            )
            for s, p in zip(samples, pieces)
        ],
    )


async def get_conversation(rollout_id: Int64, state: StateDep) -> Conversation:
    if await state.store.get_rollout(rollout_id) is None:
        raise NotFound(f"rollout {rollout_id} not found")
    return Conversation(rollout_id=rollout_id, messages=await rollout_conversation(state.store, rollout_id))


def create_router() -> APIRouter:
    router = APIRouter(prefix="/api", tags=["trajectories"])
    get = _getter(router)
    router.add_api_route("/rollouts", create_rollout, methods=["POST"], status_code=201, response_model=RolloutCreated)
    get("/rollouts", list_rollouts, Page[RolloutSummary])
    get("/rollouts/{rollout_id}", get_rollout, RolloutView)
    get("/rollouts/{rollout_id}/calls", calls.list_rollout_calls, Page[CallView])
    get("/rollouts/{rollout_id}/samples", list_rollout_samples, SampleList)
    # Optional keys (tool_calls, tool_call_id, call_id) are left out rather than sent as null.
    router.add_api_route(
        "/rollouts/{rollout_id}/conversation",
        get_conversation,
        methods=["GET"],
        response_model=Conversation,
        response_model_exclude_none=True,
    )
    router.add_api_route(
        "/rollouts/{rollout_id}/reward", add_rollout_reward, methods=["POST"], response_model=RolloutView
    )
    router.add_api_route("/rollouts/{rollout_id}/end", end_rollout, methods=["POST"], response_model=RolloutView)
    # The route's earlier name, for harness scripts written against it ("finished" is one way to end).
    router.add_api_route(
        "/rollouts/{rollout_id}/finish", end_rollout, methods=["POST"], response_model=RolloutView, deprecated=True
    )
    router.add_api_route("/feedback", live.post_feedback, methods=["POST"], response_model=live.FeedbackRecorded)
    get("/live", live.get_live, live.LiveReport)
    get("/policies", policies.list_policies, list[policies.PolicySummaryView])
    get("/policies/{policy}", policies.get_policy, policies.PolicyDetail)
    get("/groups", runs.list_groups, Page[GroupView])
    get("/groups/{group_id}", runs.get_group, GroupView)
    get("/calls", calls.list_calls, Page[CallView])
    get("/calls/{call_id}", calls.get_call, CallDetail)
    get("/runs", runs.list_runs, Page[RunView])
    get("/runs/{name}", runs.get_run, RunView)
    get("/runs/{name}/summary", runs.get_run_summary, RunSummary)
    get("/runs/{name}/health", runs.get_run_health, list[CaptureHealthView])
    get("/runs/{name}/mismatch", runs.get_run_mismatch, list[MismatchSummaryView])
    get("/runs/{name}/steps", runs.list_run_steps, Page[LearnerStepView])
    return router


def _getter(router: APIRouter):
    def get(path: str, endpoint, response_model) -> None:
        router.add_api_route(path, endpoint, methods=["GET"], response_model=response_model)

    return get
