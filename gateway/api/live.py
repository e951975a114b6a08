"""The live-traffic routes. ``GET /api/live``: a run's live sessions per user (rewarded, excluded and
why, trained) and the version serving them with its promotions and rollbacks.

``POST /api/feedback``: a reward that arrives late, for a live key's session (rollout), named by the
rollout, by one of its calls (the ids every answer carries in its headers) or by its user (their most
recent session: what a git hook or a CI step knows). Admin key only: feedback is a reward, and an agent
holding a live key must not score itself."""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.api.params import RowId
from gateway.api.protocol import Finite
from gateway.errors import InvalidRequest, NotFound
from gateway.state import AdminStateDep
from store.rewards import InvalidReward


class Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollout_id: RowId | None = None
    call_id: RowId | None = None
    user: str | None = Field(default=None, min_length=1, max_length=200)
    score: Finite
    note: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _one_target(self) -> Feedback:
        if sum(x is not None for x in (self.rollout_id, self.call_id, self.user)) != 1:
            raise ValueError("name exactly one of rollout_id, call_id and user")
        return self


class FeedbackRecorded(BaseModel):
    rollout_id: int
    reward: float | None  # the session's total reward now
    rewards: dict[str, float | None]


async def post_feedback(body: Feedback, state: AdminStateDep) -> FeedbackRecorded:
    rollout_id = await _session_named(body, state)
    try:
        found = await state.store.live_keys.feedback(rollout_id, body.score, body.note)
    except InvalidReward as exc:
        raise InvalidRequest(str(exc), param="score") from None
    if not found:
        raise NotFound(
            f"rollout {rollout_id} is no live session: feedback scores sessions of live keys; a task's "
            f"rollout takes its rewards with POST /api/rollouts/{rollout_id}/reward while it runs"
        )
    rollout = (await state.store.get_rollout(rollout_id))[0]
    return FeedbackRecorded(rollout_id=rollout_id, reward=rollout.reward, rewards=rollout.rewards)


async def _session_named(body: Feedback, state) -> int:
    if body.rollout_id is not None:
        return body.rollout_id
    if body.call_id is not None:
        call = await state.store.calls.get(body.call_id)
        if call is None:
            raise NotFound(f"call {body.call_id} not found")
        return call.rollout_id
    latest = await state.store.live_keys.latest_session(body.user)
    if latest is None:
        raise NotFound(f"{body.user!r} has no live session: their agent has not called with a live key yet")
    return latest


class LiveReport(BaseModel):
    run: str
    promoted: int  # the version new sessions are served (0: the base model)
    canary: dict | None  # {"version", "fraction"} of new sessions served a candidate first
    history: list[dict]  # promotions and rollbacks: {"version", "at", "why"}
    users: list[dict]  # per user: sessions, running, rewarded, reward_mean, redacted, findings, ...


async def get_live(state: AdminStateDep, run: str = "live") -> LiveReport:
    serving = await state.store.live_keys.serving(run)
    users = [dataclasses.asdict(u) for u in await state.store.live_keys.report(run)]
    return LiveReport(run=run, users=users, **serving.as_config())
