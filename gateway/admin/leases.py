"""Admin routes of rollout workers' leases (``store.leases``): claim slots of a run, renew the
leases held, and hand them back done or unplayed. The admin key only: a rollout token opens none of them
(the control plane's guard, ``gateway.boundary.admin_guard``), and no sandbox route forwards /admin."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from gateway.api.params import RowId
from gateway.state import AdminStateDep
from store.leases import Leases, RoundSlots, SlotEnd

Name = Field(min_length=1, max_length=200)


class ClaimSlots(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: str = Name
    round: StrictInt = Field(default=0, ge=0, le=2**31 - 1)
    group: str = Name  # the group the worker creates this round's rollouts in (e.g. "r0")
    tasks: list[str] = Field(min_length=1, max_length=100_000)
    group_size: StrictInt = Field(ge=1, le=4096)
    worker: str = Name  # the claiming worker's id (e.g. host-pid), unique per process
    limit: StrictInt = Field(ge=0, le=4096)  # at most this many slots (a worker's free concurrency)
    lease_s: StrictFloat = Field(gt=0, le=3600)  # the lease's length; renew well before it ends
    holding: list[RowId] = Field(default_factory=list, max_length=4096)  # leases the worker plays: not again


class LeaseView(BaseModel):
    id: int
    task: str
    index: int
    attempts: int
    expires_at: float  # seconds since the epoch, the gateway's clock


class Claimed(BaseModel):
    leases: list[LeaseView]
    remaining: int  # slots of these tasks not done yet (held by any worker, or open), these included
    taken_over: list[int]  # rollouts cancelled because their worker's lease had expired


class RenewLeases(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: str = Name
    leases: list[RowId] = Field(max_length=4096)
    lease_s: StrictFloat = Field(gt=0, le=3600)


class Renewed(BaseModel):
    renewed: list[int]
    lost: list[int]  # no longer this worker's (expired and taken over): stop their rollouts


class SlotEnded(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lease: RowId
    done: StrictBool  # true: its rollout ended (rollout_id); false: handed back unplayed (a JSON boolean: 0 is no bool)
    rollout_id: RowId | None = None


class ReleaseLeases(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: str = Name
    leases: list[SlotEnded] = Field(max_length=4096)


class Released(BaseModel):
    lost: list[int]  # leases this worker no longer held: nothing was changed for them


def _leases(state) -> Leases:
    return state.store.leases


async def claim(body: ClaimSlots, state: AdminStateDep) -> Claimed:
    slots = RoundSlots(body.run, body.round, body.group, body.tasks, body.group_size)
    found = await _leases(state).claim(slots, body.worker, body.limit, body.lease_s, body.holding)
    return Claimed(
        leases=[
            LeaseView(id=x.id, task=x.task, index=x.slot, attempts=x.attempts, expires_at=x.expires_at)
            for x in found.leases
        ],
        remaining=found.remaining,
        taken_over=list(found.taken_over),
    )


async def renew(body: RenewLeases, state: AdminStateDep) -> Renewed:
    renewed, lost = await _leases(state).renew(body.worker, body.leases, body.lease_s)
    return Renewed(renewed=sorted(renewed), lost=sorted(lost))


async def release(body: ReleaseLeases, state: AdminStateDep) -> Released:
    ends = [SlotEnd(end.lease, end.done, end.rollout_id) for end in body.leases]
    return Released(lost=sorted(await _leases(state).release(body.worker, ends)))


def add_routes(router: APIRouter) -> None:
    router.add_api_route("/leases/claim", claim, methods=["POST"], response_model=Claimed)
    router.add_api_route("/leases/renew", renew, methods=["POST"], response_model=Renewed)
    router.add_api_route("/leases/release", release, methods=["POST"], response_model=Released)
