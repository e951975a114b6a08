"""The slot leases one runner holds while several share a run (``store.leases``, through ``/admin/leases``).

A slot (round, task, index) is claimed with a lease, renewed every third of ``lease_s`` while its rollout
runs, and released done once the rollout ended. A lease that another runner took over (this one's
expired) is *lost*: the job playing it is stopped and its rollout is not this runner's to end.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket

from contracts.gateway_client import GatewayClient
from store.records import RolloutStatus
from store.round_slots import RoundSlots

INTERRUPTED = "interrupted: the runner stopped before this rollout ended; rerun replaces it"
DEFAULT_LEASE_S = 30.0  # a dead runner's slots are played again this long after its last renewal


def default_worker_id() -> str:
    """This process's id among a run's runners: host, pid and a random part (containers sharing the
    host's name, each its process 1, still differ)."""
    return f"{socket.gethostname()[:160]}-{os.getpid()}-{secrets.token_hex(4)}"


class LeaseLost(RuntimeError):
    """Another runner took over the slot (this one's lease expired): its rollout is not ours to end."""


class SlotLeases:
    def __init__(self, gateway: GatewayClient, worker: str, lease_s: float):
        self.gateway, self.worker, self.lease_s = gateway, worker, lease_s
        self.held: dict[int, int | None] = {}  # lease id -> its rollout id (None until created)
        self.lost: set[int] = set()
        self.jobs: dict[int, asyncio.Task] = {}  # lease id -> the job playing it (stopped when lost)

    async def claim(self, run: str, round_: int, group: str, tasks: list[str], group_size: int, limit: int) -> dict:
        """Up to ``limit`` free slots of the round, now held; the gateway's answer (leases, remaining)."""
        slots = RoundSlots(run, round_, group, tasks, group_size)
        # the leases it plays are never handed to it again, one whose renewal came late (expired) too
        claim = await self.gateway.claim_slots(slots, self.worker, limit, self.lease_s, holding=sorted(self.held))
        self.held.update({lease["id"]: None for lease in claim["leases"]})
        return claim

    async def heartbeat(self) -> None:
        """Renew every lease held, every third of ``lease_s``; a lost lease's job is stopped."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            held = list(self.held)
            if not held:
                continue
            try:
                answer = await self.gateway.renew_leases(self.worker, held, self.lease_s)
            except RuntimeError:  # the gateway is away for now: the next beat tries again
                continue
            for lease in answer["lost"]:
                self._lose(lease)
                job = self.jobs.get(lease)
                if job is not None:
                    job.cancel()

    def started(self, lease: int, rollout_id: int) -> None:
        """The slot's rollout exists: ended as interrupted if this runner hands the slot back."""
        self.held[lease] = rollout_id

    def is_lost(self, lease: int) -> bool:
        """Another runner took the slot over: its rollout is not this runner's to end."""
        return lease in self.lost

    async def still_held(self, lease: int) -> None:
        """Renew one lease now; LeaseLost when another runner holds it."""
        if (
            lease not in self.lost
            and lease in (await self.gateway.renew_leases(self.worker, [lease], self.lease_s))["renewed"]
        ):
            return
        self._lose(lease)
        raise LeaseLost(f"slot lease {lease} was taken over by another runner (this one's lease expired)")

    async def done(self, lease: int, rollout_id: int) -> None:
        """The slot's rollout ended: release the lease as done (once)."""
        if self.held.pop(lease, None) is not None:
            await self.gateway.release_leases(self.worker, [{"lease": lease, "done": True, "rollout_id": rollout_id}])

    async def give_up(self, lease: int) -> None:
        """Stop holding a slot whose rollout could not be ended: handed back open (or, with the gateway
        away, left to expire), so a claim replaces the rollout, or finds it ended and settles the slot."""
        self.held.pop(lease, None)
        try:
            await self.gateway.release_leases(self.worker, [{"lease": lease, "done": False}])
        except RuntimeError:
            pass

    async def hand_back(self, running: dict[int, asyncio.Task]) -> None:
        """On the way out (an interrupt, an error): stop what runs, end its rollouts as interrupted
        (their leases are ours) and hand the slots back open, for any runner to play."""
        for job in running.values():
            job.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        held, self.held = dict(self.held), {}
        try:
            for rollout_id in [r for r in held.values() if r is not None]:
                await self.gateway.end_rollout(rollout_id, RolloutStatus.CANCELLED, INTERRUPTED, {})
            if held:
                await self.gateway.release_leases(self.worker, [{"lease": lease, "done": False} for lease in held])
        except RuntimeError:  # gone: the leases expire and another runner takes over
            pass

    def _lose(self, lease: int) -> None:
        self.lost.add(lease)
        self.held.pop(lease, None)
