"""Wire models of the REST API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

NAME = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f/]+$")


class CreateRollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: str = NAME
    task: str = Field(min_length=1, max_length=400, pattern=r"^[^\x00-\x1f]+$")
    group: str | None = Field(default=None, min_length=1, max_length=200)
    meta: dict[str, Any] = Field(default_factory=dict)  # e.g. {"harness": "opencode"}
    # How the run's calls are captured; set when the run is created (default "engine").
    capture: Literal["engine", "tito"] | None = None
    # G, the group's size: the group becomes ready for the learner when all G rollouts ended.
    group_size: int | None = Field(default=None, ge=1, le=4096)


class AddReward(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="api", min_length=1, max_length=200)
    value: float | None  # None: this source has no opinion (left out of the total)


class FinishRollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["finished", "failed"]
    error: str | None = None  # why it failed: timeout, crash, ...
    rewards: dict[str, float | None] = Field(default_factory=dict)  # final components, added first


class GroupView(BaseModel):
    id: int
    run: str
    task: str
    name: str
    status: str  # open | ready | consumed
    size: int | None
    ready_at: datetime | None
    created_at: datetime


class RolloutCreated(BaseModel):
    id: int
    token: str
    base_url: str  # ends in /r/<token>/v1: the agent's OpenAI base URL


class RolloutSummary(BaseModel):
    """A rollout in a listing (no call counts: listings stay one query)."""

    id: int
    run: str
    task: str
    group: str
    status: str
    reward: float | None
    error: str | None
    meta: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None


class GraphStats(BaseModel):
    calls: int
    roots: int  # calls extending no earlier call: first turns, subagents, side calls, rewrites
    forks: int  # roots that diverged inside an earlier call's sampled tokens
    drift_tokens: int  # sampled tokens lost at those divergences


class RolloutView(RolloutSummary):
    """One rollout in full: its reward components, calls and call graph."""

    rewards: dict[str, float | None]
    num_calls: int
    graph: GraphStats


class CallView(BaseModel):
    id: int
    rollout_id: int
    parent_id: int | None
    fork_of: int | None
    drift_tokens: int
    dialect: str
    model: str
    engine_model: str
    policy_version: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: str | None
    tags: list[str]
    latency_ms: float
    created_at: datetime


class CallDetail(CallView):
    request: dict[str, Any]
    response: dict[str, Any]


class SampleView(BaseModel):
    """One training sample: a root-to-leaf path of the call graph as a single token sequence."""

    call_ids: list[int]  # root -> leaf
    num_turns: int
    input_ids: list[int]
    loss_mask: list[int]  # 1 on tokens the model sampled; prompt and tool output are 0
    old_logprobs: list[float]  # the sampler's logprobs, 0 where loss_mask is 0
    policy_versions: list[int]  # version that sampled each token, -1 where loss_mask is 0


class SampleList(BaseModel):
    rollout_id: int
    reward: float | None
    data: list[SampleView]


class RunView(BaseModel):
    id: int
    name: str
    config: dict[str, Any]
    created_at: datetime


class Page(BaseModel, Generic[T]):
    """Keyset pagination: pass ``next_cursor`` as ``after`` to get the next page."""

    data: list[T]
    next_cursor: int | None
