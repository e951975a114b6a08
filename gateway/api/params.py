"""Query and path parameters and the page shape every REST listing shares (keyset pagination).

Integers reach SQL, so each is bounded by its column: ids and cursors are 64-bit, versions and steps
32-bit; a larger one is a 400 naming the bound, not an overflow in the database driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from annotated_types import Ge, Le
from fastapi import Query
from pydantic import StrictInt

from gateway.api.protocol import Page

T = TypeVar("T")

INT64_MAX, INT32_MAX = 2**63 - 1, 2**31 - 1
Int64 = Annotated[int, Ge(-INT64_MAX - 1), Le(INT64_MAX)]  # ids (BIGINT columns)
Int32 = Annotated[int, Ge(-INT32_MAX - 1), Le(INT32_MAX)]  # policy versions, learner steps (INTEGER columns)
# A row's id in a request body (a lease, a rollout, a call): a JSON number, as every number of a body
RowId = Annotated[StrictInt, Ge(1), Le(INT64_MAX)]

Limit = Annotated[int, Query(ge=1, le=1000)]
After = Annotated[int, Query(ge=0, le=INT64_MAX, description="return items with id greater than this cursor")]
StepAfter = Annotated[int, Query(ge=-1, le=INT32_MAX, description="return steps after this step")]
Order = Annotated[
    Literal["asc", "desc"],
    Query(
        description="by id: asc (oldest first) or desc (newest first; the cursor then returns items with smaller ids)"
    ),
]


def page_of(items: list[T], limit: int, cursor: Callable[[T], int] = lambda item: item.id) -> Page[T]:
    """A full page points past its last item; a short one is the last."""
    return Page[T](data=items, next_cursor=cursor(items[-1]) if len(items) == limit else None)
