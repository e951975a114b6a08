"""A create-rollout request as the store keeps it: a digest of what it asked for, so a retry with the same
request id is told from another request, and the rollout an earlier request with that id created."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from store.tables import Rollout, Run


class RequestConflict(ValueError):
    """A request id that already created a rollout, sent again with a different body."""


def request_digest(
    task: str,
    group: str | None,
    meta: dict,
    capture: str | None,
    group_size: int | None,
    sampling: dict[str, float] | None,
    policy: str | None = None,
    run_policy: str | None = None,
) -> str:
    """What a create-rollout request asked for, so a retry can be told from another request."""
    asked = {
        "task": task,
        "group": group,
        "meta": meta,
        "capture": capture,
        "group_size": group_size,
        "sampling": sampling or None,
    }
    if policy is not None:  # absent from the digests of requests without a pin, as before
        asked["policy"] = policy
    if run_policy is not None:
        asked["run_policy"] = run_policy
    canonical = json.dumps(asked, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def created_by(session: AsyncSession, run: Run, request_id: str) -> Rollout | None:
    """The rollout ``request_id`` created in ``run``, read holding the run's row until the transaction ends.

    Creates naming a request id in a run go one at a time, each seeing what the one before committed, so a
    second request with the id is answered or refused before it makes a task or group: a refusal leaves no
    row behind. An UPDATE, as SQLite has no SELECT ... FOR UPDATE; there it also opens the write transaction
    first, so the rows made after it go with its rollback (a savepoint released outside one commits).
    """
    await session.execute(update(Run).where(Run.id == run.id).values(name=Run.name))
    query = select(Rollout).where(Rollout.run_id == run.id, Rollout.request_id == request_id)
    return (await session.scalars(query)).first()


def check_same_body(earlier: Rollout | None, request_id: str, digest: str | None) -> None:
    """RequestConflict when ``earlier`` (the rollout this request id created) was asked for another body."""
    if earlier is not None and earlier.request_digest != digest:
        raise RequestConflict(
            f"request id {request_id!r} already created rollout {earlier.id} with another body: a retry "
            f"sends the same body; a new rollout needs a new request id"
        )
