"""What an agent sends is bounded in the store: request fields no wire model declares are stored by name
and size when large (``gateway.request.unknown_fields``), while the engine is still sent them."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gateway.request.unknown_fields import KEPT_BYTES, MAX_NAME_CHARS, MAX_OMITTED_NAMED
from store.json_text import json_bytes
from tests.builders import chat_body, messages_body

JUNK_BYTES = 24 * 1024 * 1024  # under the 32 MiB body cap: the gateway must take it


def database_bytes(url: str) -> int:
    """A SQLite file database's size on disk, its write-ahead log included."""
    path = Path(make_url(url).database)
    return sum(p.stat().st_size for p in (path, path.with_name(f"{path.name}-wal")) if p.exists())


async def last_request(gateway) -> dict:
    """The last recorded call's request, as the store gives it back."""
    calls = (await gateway.http.get("/api/calls", params={"limit": 1000})).json()["data"]
    return (await gateway.http.get(f"/api/calls/{max(c['id'] for c in calls)}")).json()["request"]


async def test_five_24_mib_junk_fields_are_stored_by_size_growing_the_database_by_under_a_mib(gateway, sqlite_db):
    rollout = await gateway.new_rollout()
    url = f"/r/{rollout['token']}/v1/chat/completions"
    assert (await gateway.agent.post(url, json=chat_body())).status_code == 200  # the rollout's rows exist
    before = database_bytes(sqlite_db)
    junk = "j" * JUNK_BYTES
    for turn in range(5):
        response = await gateway.agent.post(url, json={**chat_body(f"turn {turn}"), "junk": junk})
        assert response.status_code == 200, response.text[:500]
        assert len(gateway.fake.requests[-1]["junk"]) == JUNK_BYTES  # the engine is sent it as received
        gateway.fake.requests.clear()
    assert database_bytes(sqlite_db) - before < 1024 * 1024
    stored = await last_request(gateway)
    assert "junk" not in stored and stored["_gateway"] == {"omitted_fields": {"junk": {"bytes": JUNK_BYTES + 2}}}
    assert stored["messages"] == chat_body("turn 4")["messages"]  # the declared fields as sent


DIALECTS = {
    "chat": ("/v1/chat/completions", chat_body()),
    "completions": ("/v1/completions", {"model": "policy", "prompt": "Hi"}),
    "responses": ("/v1/responses", {"model": "policy", "input": "Hi"}),
    "messages": ("/v1/messages", messages_body()),
}


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_large_undeclared_field_is_stored_by_size_and_a_small_one_as_sent_in_every_dialect(gateway, dialect):
    rollout = await gateway.new_rollout()
    path, body = DIALECTS[dialect]
    sent = {**body, "vendor_option": {"level": 2}, "junk": "j" * 100_000}
    response = await gateway.agent.post(f"/r/{rollout['token']}{path}", json=sent)
    assert response.status_code == 200, response.text
    stored = await last_request(gateway)
    assert stored["vendor_option"] == {"level": 2} and "junk" not in stored
    assert stored["_gateway"]["omitted_fields"] == {"junk": {"bytes": 100_002}}


async def test_a_flood_of_undeclared_fields_and_a_huge_name_leave_a_bounded_record(gateway):
    rollout = await gateway.new_rollout()
    huge_name = "n" * (1024 * 1024)
    flood = {f"field{n}": "v" * 1000 for n in range(500)}
    body = {**chat_body(), **flood, huge_name: 1}
    response = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    stored = await last_request(gateway)
    assert len(json_bytes(stored)) < KEPT_BYTES + 8 * 1024  # the fields kept, the names, the counts
    notes = stored["_gateway"]
    assert len(notes["omitted_fields"]) == MAX_OMITTED_NAMED and huge_name not in stored
    kept = [name for name in flood if name in stored]
    assert kept and len(kept) + len(notes["omitted_fields"]) + notes["omitted_more"]["fields"] == len(flood) + 1
    assert all(len(name) <= MAX_NAME_CHARS for name in notes["omitted_fields"])


async def test_a_client_cannot_write_the_gateways_notes_into_its_record(gateway):
    rollout = await gateway.new_rollout()
    forged = {"omitted_fields": {"secret_field": {"bytes": 1}}}
    body = {**chat_body(), "_gateway": forged, "junk": "j" * 10_000}
    response = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert (await last_request(gateway))["_gateway"] == {"omitted_fields": {"junk": {"bytes": 10_002}}}
