"""Lease scenarios run on SQLite (unit tier) and on PostgreSQL (integration tier): claim, renew,
expire, take over, and many workers claiming at once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from store.leases import TAKEN_OVER, Leases, RoundSlots, SlotEnd
from store.records import LeaseStatus
from store.rewards import RolloutEnded
from store.store import Store


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


async def _rollout(store: Store, task: str, index: int) -> int:
    identity = await store.create_rollout("leased", task, "r0", {"round": 0, "index": index}, group_size=2)
    return identity.rollout_id


def _slots(claim) -> list[tuple[str, int]]:
    return [(lease.task, lease.slot) for lease in claim.leases]


async def check_claim_renew_expire_take_over(database_url: str) -> None:
    store, clock = Store.from_url(database_url), Clock()
    leases = Leases(store.sessions, clock=clock)
    tasks = ["a", "b"]

    async def claim(worker: str, limit: int):
        return await leases.claim(RoundSlots("leased", 0, "r0", tasks, 2), worker, limit, lease_s=10.0)

    try:
        first = await claim("w1", 3)
        assert _slots(first) == [("a", 0), ("a", 1), ("b", 0)] and first.remaining == 4
        assert all(lease.attempts == 1 and lease.expires_at == 1_010.0 for lease in first.leases)
        second = await claim("w2", 5)
        assert _slots(second) == [("b", 1)]
        assert _slots(await claim("w2", 5)) == []  # everything is held, nothing expired
        ids = {slot: lease.id for slot, lease in zip(_slots(first), first.leases)}

        # w1 plays its three slots; a/0 ends and is marked done.
        rollouts = {slot: await _rollout(store, *slot) for slot in ids}
        await store.end_rollout(rollouts["a", 0], "finished", rewards={"v": 1.0})
        assert await leases.release("w1", [SlotEnd(ids["a", 0], True, rollouts["a", 0])]) == set()

        # Another worker can neither renew nor release (nor so end) w1's leases.
        clock.now = 1_005.0
        assert await leases.renew("w2", [ids["a", 1]], 10.0) == (set(), {ids["a", 1]})
        assert await leases.release("w2", [SlotEnd(ids["a", 1], False)]) == {ids["a", 1]}
        assert await leases.renew("w1", [ids["a", 1], ids["b", 0]], 10.0) == ({ids["a", 1], ids["b", 0]}, set())
        assert await leases.renew("w2", [second.leases[0].id], 60.0) == ({second.leases[0].id}, set())

        # w1 stops renewing: at 1,015 its leases expire and w2 takes them over, cancelling their rollouts.
        clock.now = 1_014.9
        assert _slots(await claim("w2", 5)) == []
        clock.now = 1_015.1
        taken = await claim("w2", 5)
        assert _slots(taken) == [("a", 1), ("b", 0)] and all(lease.attempts == 2 for lease in taken.leases)
        assert sorted(taken.taken_over) == sorted([rollouts["a", 1], rollouts["b", 0]])
        for slot in (("a", 1), ("b", 0)):
            rollout, *_ = await store.get_rollout(rollouts[slot])
            assert (rollout.status, rollout.error) == ("cancelled", TAKEN_OVER)
        assert await leases.renew("w1", [ids["a", 1]], 10.0) == (set(), {ids["a", 1]})  # w1 learns it lost them

        # w2 ends b/1's rollout and dies before marking the slot done: whoever claims it next finds it ended.
        b1 = await _rollout(store, "b", 1)
        await store.end_rollout(b1, "failed", "agent crashed")
        clock.now = 1_100.0
        again = await claim("w3", 5)
        assert _slots(again) == [("a", 1), ("b", 0)]  # b/1 is not played again
        rows = {(row.task, row.slot): row for row in await leases.slots("leased", 0)}
        assert (rows["b", 1].status, rows["b", 1].rollout_id) == (LeaseStatus.DONE, b1)
        assert (rows["a", 0].status, rows["a", 0].rollout_id) == (LeaseStatus.DONE, rollouts["a", 0])
        assert again.remaining == 2

        # A worker whose own renewal came late is not handed the slots it is still playing; restarted
        # (holding nothing), it takes them back.
        clock.now = 1_200.0
        held = [lease.id for lease in again.leases]
        assert _slots(await leases.claim(RoundSlots("leased", 0, "r0", tasks, 2), "w3", 5, 10.0, holding=held)) == []
        assert sorted(lease.id for lease in (await claim("w3", 5)).leases) == sorted(held)

        # Handed back unplayed: open again, for anyone, at once.
        assert await leases.release("w3", [SlotEnd(lease.id, False) for lease in again.leases]) == set()
        assert _slots(await claim("w4", 1)) == [("a", 1)]
    finally:
        await store.close()


async def check_concurrent_claims_are_disjoint(database_url: str, workers: int = 6, limit: int = 4) -> None:
    """``workers`` claims at once over 5 tasks x G=4: every slot to exactly one of them."""
    store = Store.from_url(database_url)
    leases = Leases(store.sessions)
    tasks = [f"t{n}" for n in range(5)]
    try:
        claims = await asyncio.gather(
            *[leases.claim(RoundSlots("race", 0, "r0", tasks, 4), f"w{n}", limit, 30.0) for n in range(workers)]
        )
        got = [slot for claim in claims for slot in _slots(claim)]
        assert len(got) == len(set(got)) == min(workers * limit, 20)
        rows = await leases.slots("race", 0)
        assert len(rows) == 20
        owners = {(row.task, row.slot): row.worker for row in rows if row.worker}
        for n, claim in enumerate(claims):
            assert all(owners[slot] == f"w{n}" for slot in _slots(claim))
    finally:
        await store.close()


async def check_take_overs_race_finishes(database_url: str, run: str = "race-2") -> None:
    """A dead worker's 16 slots, their rollouts running: 4 workers take them over while the rollouts'
    finishes land at the same moment. No deadlock; each rollout ends once (finished, or cancelled by the
    take-over), and a slot is handed out again only where its rollout was cancelled."""
    store, clock = Store.from_url(database_url), Clock()
    leases = Leases(store.sessions, clock=clock)
    tasks = [f"t{n}" for n in range(4)]
    try:
        dead = await leases.claim(RoundSlots(run, 0, "r0", tasks, 4), "dead", 16, 10.0)
        rollouts = {}
        for lease in dead.leases:
            identity = await store.create_rollout(
                run, lease.task, "r0", {"round": 0, "index": lease.slot}, group_size=4
            )
            rollouts[lease.task, lease.slot] = identity.rollout_id
        clock.now += 11.0

        async def finish(rollout_id: int) -> bool:
            try:
                return await store.end_rollout(rollout_id, "finished", rewards={"v": 1.0})
            except RolloutEnded:  # the take-over cancelled it first
                return False

        results = await asyncio.gather(
            *[leases.claim(RoundSlots(run, 0, "r0", tasks, 4), f"w{n}", 4, 10.0) for n in range(4)],
            *[finish(r) for r in rollouts.values()],
        )
        claims, finished = results[:4], dict(zip(rollouts, results[4:]))
        handed = [slot for claim in claims for slot in _slots(claim)]
        assert len(handed) == len(set(handed))
        assert set(handed) == {slot for slot, won in finished.items() if not won}  # only cancelled ones again
        cancelled = {r for claim in claims for r in claim.taken_over}
        assert cancelled == {rollouts[slot] for slot in handed}
        rows = {(row.task, row.slot): row for row in await leases.slots(run, 0)}
        assert all(
            rows[slot].status == LeaseStatus.DONE and rows[slot].rollout_id == rollouts[slot]
            for slot, won in finished.items()
            if won
        )
    finally:
        await store.close()


async def check_claims_follow_the_round_order(database_url: str) -> None:
    """A round's slots go out in the order its tasks were given (a shuffled or drawn round), not by name."""
    store = Store.from_url(database_url)
    leases = Leases(store.sessions, clock=Clock())
    try:
        ordered = RoundSlots("ordered", 0, "r0", ["c", "a", "b"], 2)
        first = await leases.claim(ordered, "w1", 3, lease_s=10.0)
        rest = await leases.claim(ordered, "w1", 5, lease_s=10.0)
        assert _slots(first) == [("c", 0), ("c", 1), ("a", 0)]
        assert _slots(rest) == [("a", 1), ("b", 0), ("b", 1)]
    finally:
        await store.close()
