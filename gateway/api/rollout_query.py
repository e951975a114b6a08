"""The query of ``GET /api/rollouts`` as two values: its filters (``store.listings.RolloutFilter``) and its
page (cursor and size), each read by a FastAPI dependency.

FastAPI lists a route's query parameters its own first, then its dependencies' in the order the route
names them, and validates them in that order: the filters' dependency, then the page's, keep the order,
bounds and descriptions the route had when it declared all ten itself, so its OpenAPI and its 400s (every
bad value named, the first as ``param``) stay the same. Neither dependency refuses anything of its own:
a check across fields (``reward_min`` above ``reward_max``) is the route's, after every value is valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends

from gateway.api.params import After, Int32, Int64, Limit
from store.listings import RolloutFilter


@dataclass(frozen=True)
class PageAsked:
    after: int  # the cursor: items with ids greater than this
    limit: int  # items at most


# async: a sync dependency would cost a threadpool hop on every request
async def rollout_filter(
    run: str | None = None,
    task: str | None = None,
    group_id: Int64 | None = None,
    status: str | None = None,
    harness: str | None = None,
    policy_version: Int32 | None = None,
    reward_min: float | None = None,
    reward_max: float | None = None,
) -> RolloutFilter:
    return RolloutFilter(
        run=run,
        task=task,
        group_id=group_id,
        status=status,
        harness=harness,
        policy_version=policy_version,
        reward_min=reward_min,
        reward_max=reward_max,
    )


async def page_asked(after: After = 0, limit: Limit = 100) -> PageAsked:
    return PageAsked(after, limit)


RolloutFilterQuery = Annotated[RolloutFilter, Depends(rollout_filter)]
PageQuery = Annotated[PageAsked, Depends(page_asked)]
