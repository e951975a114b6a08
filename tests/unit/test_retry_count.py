"""RetryCount (gateway/boundary/retry_count.py): the SDKs' x-stainless-retry-count reaches the pipeline
as a number (gateway.request.retries.retry_count), bounded; absent or not a number, 0."""

from __future__ import annotations

import pytest

from gateway.boundary import RetryCount
from gateway.boundary.retry_count import MAX_COUNTED
from gateway.request.retries import retry_count
from tests.asgi_calls import Recorded, call, http_scope, ok_app


@pytest.mark.parametrize(("header", "seen"), [(None, 0), ("2", 2), ("-1", 0), ("two", 0), ("9" * 40, MAX_COUNTED)])
async def test_the_retry_count_is_what_the_app_sees(header, seen):
    noted: list[int] = []
    recorded = Recorded()
    headers = {"x-stainless-retry-count": header} if header is not None else {}
    app = ok_app(recorded, then=lambda: noted.append(retry_count.get()))
    await call(RetryCount(app), http_scope("/v1/chat/completions", headers), recorded)
    assert noted == [seen]
