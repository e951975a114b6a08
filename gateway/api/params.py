"""Query parameters and the page shape every REST listing shares (keyset pagination)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from fastapi import Query

from gateway.api.protocol import Page

T = TypeVar("T")

Limit = Annotated[int, Query(ge=1, le=1000)]
After = Annotated[int, Query(ge=0, description="return items with id greater than this cursor")]
Order = Annotated[Literal["asc", "desc"], Query(description="by id: asc (oldest first) or desc (newest first; "
                                                            "the cursor then returns items with smaller ids)")]


def page_of(items: list[T], limit: int, cursor: Callable[[T], int] = lambda item: item.id) -> Page[T]:
    """A full page points past its last item; a short one is the last."""
    return Page[T](data=items, next_cursor=cursor(items[-1]) if len(items) == limit else None)
