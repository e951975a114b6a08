"""Slot leases on SQLite and a real PostgreSQL (FOR UPDATE SKIP LOCKED): claim, renew, expiry, take-over,
and many workers claiming at once."""

from __future__ import annotations

from tests.lease_scenarios import (
    check_claim_renew_expire_take_over,
    check_claims_follow_the_round_order,
    check_concurrent_claims_are_disjoint,
    check_take_overs_race_finishes,
)


async def test_slots_are_claimed_renewed_expired_and_taken_over(database_url):
    await check_claim_renew_expire_take_over(database_url)


async def test_claims_follow_the_order_of_the_rounds_tasks(database_url):
    await check_claims_follow_the_round_order(database_url)


async def test_concurrent_claims_get_disjoint_slots(database_url):
    await check_concurrent_claims_are_disjoint(database_url, workers=12, limit=3)


async def test_take_overs_racing_finishes_neither_deadlock_nor_replay_a_finished_slot(database_url):
    for n in range(3):  # a few interleavings
        await check_take_overs_race_finishes(database_url, f"race-{n}")
