"""Admin routes: publish a new adapter, show the policy versions being served and the engines serving them."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from contracts.publication import AdapterPublished, PolicyName, PolicyView, ProbeAnswer, PublishAdapter
from gateway.admin import leases
from gateway.api import policies
from gateway.api.policies import PolicySummaryView
from gateway.engine.proof import tolerance_for
from gateway.policy.adapters import Claim, Publication, publish_adapter
from gateway.state import AdminStateDep, StateDep
from store.policies import DEFAULT_POLICY


class EngineView(BaseModel):
    index: int  # the engine's position in ``--engine-url`` order (how errors and metrics name it)
    url: str
    healthy: bool  # False while taken out after a failure (until its probe passes and adapters reload)
    in_flight: int  # calls being served now (at most --engine-max-in-flight)
    queued: int  # calls waiting for a free slot
    rollouts: int  # rollouts pinned to it (their calls go here for its prefix cache)
    models: list[str]  # the base model and the adapter versions it holds


async def publish(body: PublishAdapter, state: AdminStateDep) -> AdapterPublished:
    policies = await state.ensure_policies()
    policy = policies.get(body.policy)
    probe = body.probe.probe() if body.probe else None
    tolerance = tolerance_for(state.settings, probe) if probe else 0.0
    async with state.publish_lock:  # one publication at a time keeps versions ordered
        publication = Publication(body.version, body.path, Claim(body.digest, probe), tolerance)
        done = await publish_adapter(
            state.engine, policies, policy, state.store, publication, state.settings.max_staleness
        )
    return AdapterPublished(
        policy=policy.name,
        version=done.version,
        name=done.name,
        load_s=done.load_s,
        unloaded=list(done.unloaded),
        loaded=policy.loaded(),
        digest=done.digest,
        proof=[ProbeAnswer(**result.as_json()) for result in done.proof],
    )


async def show_policy(state: StateDep, policy: PolicyName = DEFAULT_POLICY) -> PolicyView:
    """What the gateway serves of one policy (default: the server's default); 404 names the known ones."""
    policy = await state.known_policy(policy)
    return PolicyView(
        public_name=policy.public_name,
        policy=policy.name,
        current_version=policy.current_version,
        loaded=policy.loaded(),
        digests=policy.digests(),
        max_model_len=state.max_model_len,
        max_staleness=state.settings.max_staleness,
    )


async def list_engines(state: AdminStateDep) -> list[EngineView]:
    return [EngineView(**engine) for engine in state.engine.engines()]


def create_router() -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["admin"])
    router.add_api_route("/adapters", publish, methods=["POST"], response_model=AdapterPublished)
    router.add_api_route("/policy", show_policy, methods=["GET"], response_model=PolicyView)
    router.add_api_route("/policies", policies.list_policies, methods=["GET"], response_model=list[PolicySummaryView])
    router.add_api_route("/engines", list_engines, methods=["GET"], response_model=list[EngineView])
    leases.add_routes(router)  # rollout workers' leases
    return router
