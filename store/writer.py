"""Group commit: concurrent calls share one transaction, each waits for its own commit.

A call's response is released to the client only after ``record`` returns, so everything a
client fully received is durable; batching keeps that guarantee cheap under concurrency.

One agent at a time there is nothing to batch, and the hops (to the writer's task, to the insert
thread and back) were a tenth of a call's latency: a call recorded ``alone`` (no other call in the
gateway's flight) while the writer is idle is committed at once, on the event loop's thread when the
store can (``Store.insert_calls``), never waiting there for a lock.

A commit that fails (disk full, the database locked by another process) is remembered in
``write_failure`` until one succeeds again: ``/health`` reports the gateway degraded meanwhile. A call
whose rollout was deleted while it ran (``keys forget``) is no such failure: that call alone learns it
(``RolloutsDeleted``), the others of its batch are committed, and the gateway stays healthy. So is a call
that would take its rollout past its byte budget (``OverBudget``, ``store.stored_bytes``).
"""

from __future__ import annotations

import asyncio
import logging

from store.records import CallRecord, RolloutsDeleted
from store.store import Store
from store.stored_bytes import OverBudget
from store.tables import Call

logger = logging.getLogger(__name__)

MAX_BATCH = 256  # calls per transaction


class CallWriter:
    def __init__(self, store: Store):
        self._store = store
        self._queue: asyncio.Queue[tuple[CallRecord, asyncio.Future[int]]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._committing = 0  # commits under way (a batch, or a call recorded alone)
        self.write_failure: Exception | None = None  # why the last commit failed; None once one succeeded

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="call-writer")

    async def stop(self) -> None:
        """Drain what is queued, then stop."""
        if self._task is None:
            return
        await self._queue.join()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._task = None

    async def record(self, record: CallRecord, alone: bool = False) -> int:
        """Queue the call and wait until it is committed; returns its id. ``alone``: no other call is
        in flight, so when nothing is queued or committing either it is committed at once."""
        if self._task is None or self._task.done():
            raise RuntimeError("CallWriter is not running (create_app's lifespan starts it)")
        if alone and not self._committing and self._queue.empty():
            return await self._commit_alone(record)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        await self._queue.put((record, future))
        return await future

    async def check_budget(self, rollout_id: int) -> None:
        """BudgetSpent when none of the rollout's calls can be recorded any more (``store.stored_bytes``)."""
        await self._store.stored_bytes.check(rollout_id)

    async def add_tag(self, call_id: int, tag: str) -> None:
        """Tag a committed call afterwards (``undelivered``: its response never reached the client)."""
        async with self._store.sessions.begin() as session:
            call = await session.get(Call, call_id, with_for_update=True)
            if call is not None and tag not in (call.tags or []):
                call.tags = [*(call.tags or []), tag]

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._commit(batch)
            for _ in batch:
                self._queue.task_done()

    async def _commit_alone(self, record: CallRecord) -> int:
        self._committing += 1
        try:
            [call_id] = await self._store.insert_calls([record], inline=True)
        except (RolloutsDeleted, OverBudget):
            raise
        except Exception as exc:
            self._failed(exc, 1)
            raise
        finally:
            self._committing -= 1
        self.write_failure = None
        return call_id

    def _failed(self, exc: Exception, calls: int) -> None:
        self.write_failure = exc
        logger.exception("recording %d calls failed", calls)

    async def _commit(self, batch: list[tuple[CallRecord, asyncio.Future[int]]]) -> None:
        self._committing += 1
        try:
            ids = await self._store.insert_calls([record for record, _ in batch])
        except (RolloutsDeleted, OverBudget) as exc:  # only those calls fail; the others are committed again
            kept = _refuse(batch, exc)
            if kept:
                await self._commit(kept)
            return
        except Exception as exc:  # every waiter learns the write failed; nothing is acked
            self._failed(exc, len(batch))
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._committing -= 1
        self.write_failure = None
        for (_, future), call_id in zip(batch, ids):
            if not future.done():
                future.set_result(call_id)


def _refuse(
    batch: list[tuple[CallRecord, asyncio.Future[int]]], refused: RolloutsDeleted | OverBudget
) -> list[tuple[CallRecord, asyncio.Future[int]]]:
    """Fail the calls ``refused`` names (each with its own refusal); the rest of the batch."""
    kept = []
    for record, future in batch:
        refusal = refused.refusal_for(record)
        if refusal is None:
            kept.append((record, future))
        elif not future.done():
            future.set_exception(refusal)
    return kept
