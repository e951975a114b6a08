"""Wire models of the REST API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

NAME = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f/]+$")


class CreateRollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: str = NAME
    task: str = Field(min_length=1, max_length=400, pattern=r"^[^\x00-\x1f]+$")
    group: str | None = Field(default=None, min_length=1, max_length=200)
    meta: dict[str, Any] = Field(default_factory=dict)


class RolloutCreated(BaseModel):
    id: int
    token: str
    base_url: str  # ends in /r/<token>/v1: the agent's OpenAI base URL


class RolloutView(BaseModel):
    id: int
    run: str
    task: str
    group: str
    status: str
    reward: float | None
    error: str | None
    meta: dict[str, Any]
    num_calls: int
    created_at: datetime
    finished_at: datetime | None


class CallView(BaseModel):
    id: int
    rollout_id: int
    parent_id: int | None
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


class RunView(BaseModel):
    id: int
    name: str
    config: dict[str, Any]
    created_at: datetime


class Page(BaseModel, Generic[T]):
    """Keyset pagination: pass ``next_cursor`` as ``after`` to get the next page."""

    data: list[T]
    next_cursor: int | None
