"""Token roles stored as deltas read back whole on SQLite and PostgreSQL, the byte budget's SQL sum counts
them on both, and revision 0018 goes down and up again on both."""

from __future__ import annotations

import asyncio

from alembic import command

from migrations.runner import alembic_config, upgrade
from store.roles import roles_from_runs
from store.store import Store
from tests.token_roles import record_chain


async def test_roles_read_back_whole_and_count_in_the_budget_on_both_databases(database_url):
    store = Store.from_url(database_url)
    try:
        chain = await record_chain(store)
        nodes = await store.calls.nodes(chain.rollout_id)
        assert [bytes(n.prompt_roles) for n in nodes] == list(chain.whole_roles)
        call = await store.calls.get(chain.call_ids[2])
        assert roles_from_runs(call.prompt_roles, len(call.prompt_ids)).tobytes() == chain.whole_roles[2]
        unknown = await record_chain(store, known=(False, True, True), run="roles-unknown")
        assert [n.prompt_roles for n in await store.calls.nodes(unknown.rollout_id)] == [None, None, None]
        store.stored_bytes.budget = 1 << 30
        with_roles = await store.stored_bytes._count(chain.rollout_id)
        without = await store.stored_bytes._count(unknown.rollout_id)  # the same calls, less the root's roles
        assert with_roles - without == 5 + 4 + 1 - (4 + 1)
    finally:
        await store.close()
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0017")
    await asyncio.to_thread(upgrade, database_url)
    store = Store.from_url(database_url)
    try:
        assert [n.prompt_roles for n in await store.calls.nodes(chain.rollout_id)] == [None, None, None]
    finally:
        await store.close()
