"""Wire models of the admin API."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PublishAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1)  # N of policy-v{N}; must exceed the current version
    path: str = Field(min_length=1)  # a PEFT adapter folder the engine can read


class AdapterPublished(BaseModel):
    version: int
    name: str
    load_s: float
    unloaded: list[int]  # versions retired by this publication
    loaded: dict[int, str]  # every version now served: version -> engine name (0 = base model)


class PolicyView(BaseModel):
    public_name: str
    current_version: int
    loaded: dict[int, str]
    max_model_len: int | None = None  # the engine's context length (the learner's default token budget)
    max_staleness: int | None = None  # versions kept loaded behind the current one (the learner drops older samples)


class EngineView(BaseModel):
    index: int  # the engine's position in ``--engine-url`` order (how errors and metrics name it)
    url: str
    healthy: bool  # False while taken out after a failure (until its probe passes and adapters reload)
    in_flight: int  # calls being served now (at most --engine-max-in-flight)
    queued: int  # calls waiting for a free slot
    rollouts: int  # rollouts pinned to it (their calls go here for its prefix cache)
    models: list[str]  # the base model and the adapter versions it holds
