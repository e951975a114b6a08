"""Slot leases on SQLite and a real PostgreSQL (FOR UPDATE SKIP LOCKED): claim, renew, expiry, take-over,
and many workers claiming at once."""

from __future__ import annotations

from tests.lease_scenarios import check_claim_renew_expire_take_over, check_concurrent_claims_are_disjoint


async def test_slots_are_claimed_renewed_expired_and_taken_over(database_url):
    await check_claim_renew_expire_take_over(database_url)


async def test_concurrent_claims_get_disjoint_slots(database_url):
    await check_concurrent_claims_are_disjoint(database_url, workers=12, limit=3)
