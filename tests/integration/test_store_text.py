"""What an agent printed is stored on both databases, NUL bytes included (PostgreSQL's text refuses them:
ending such a rollout was a 500 and the rollout was lost to a failed end)."""

from __future__ import annotations

from store.records import AgentReport
from store.store import Store


async def test_an_agent_log_with_nul_bytes_ends_its_rollout_on_both_databases(database_url):
    store = Store.from_url(database_url)
    try:
        rollout = await store.create_rollout("nul-run", "t")
        log = "binary\x00output\x00"
        assert await store.end_rollout(rollout.rollout_id, "failed", "crashed\x00", agent=AgentReport(1, log))
        found = await store.get_rollout(rollout.rollout_id)
        stored = found[0]
        assert (stored.status, stored.error, stored.agent_log) == (
            "failed",
            "crashed\ufffd",
            "binary\ufffdoutput\ufffd",
        )
    finally:
        await store.close()
