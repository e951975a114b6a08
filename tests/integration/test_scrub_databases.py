"""`keys forget` and a redacting `keys scan` on SQLite and PostgreSQL: the user's rows are gone and the
store's scrub of its files (WAL truncated; VACUUM on PostgreSQL) runs beside an open connection."""

from __future__ import annotations

from store.live_keys import live_task
from store.store import Store
from tests.builders import call_record


async def test_forgetting_a_user_scrubs_the_store_on_both_databases(database_url):
    store = Store.from_url(database_url)
    reader = Store.from_url(database_url)  # another process's connection (a gateway's) stays open
    try:
        await reader.listings.run_id("live")
        await store.live_keys.create("ada")
        session = await store.create_rollout("live", live_task("ada"), meta={"live": {"user": "ada"}})
        await store.insert_calls([call_record(session.rollout_id, request={"messages": ["ada's words"]})])
        await store.end_rollout(session.rollout_id, "finished")

        gone = await store.live_keys.forget("ada")

        assert (gone.keys, gone.rollouts, gone.calls) == (1, 1, 1)
        assert await reader.live_keys.list("ada") == [] and await reader.calls.page(session.rollout_id, 0, 10) == []
        await store.scrub()  # again, with nothing left to remove
    finally:
        await reader.close()
        await store.close()
