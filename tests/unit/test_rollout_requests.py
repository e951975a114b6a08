"""A create-rollout request refused for reusing a request id leaves nothing behind (a new group made before
the refusal was committed by SQLite's savepoint release, found by the REST fuzzer)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store.rollout_requests import RequestConflict
from store.tables import Group


async def test_a_request_id_sent_again_with_another_body_is_refused_and_adds_no_group(file_store):
    first = await file_store.create_rollout("r", "t", "g1", request_id="x")
    assert (await file_store.create_rollout("r", "t", "g1", request_id="x")).rollout_id == first.rollout_id
    with pytest.raises(RequestConflict, match="another body"):
        await file_store.create_rollout("r", "t", "g2", request_id="x")
    async with file_store.sessions() as session:
        assert (await session.scalars(select(Group.name))).all() == ["g1"]
