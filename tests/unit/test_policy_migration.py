"""A store written before policies had names (revision 0016) opens with its one lineage as the policy
``policy``: its adapters, versions, digests and rollouts intact, served again after a gateway restart."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, text

from migrations.runner import upgrade
from store.database import sqlite_url
from store.policies import DEFAULT_POLICY
from store.store import Store
from tests.builders import gateway_settings
from tests.gateway_harness import start_gateway
from tests.policy_calls import served_call

BEFORE_POLICIES = "0016"
ROWS = [  # what revision 0016's code wrote: runs, tasks, groups, a rollout and two published versions
    "INSERT INTO runs (id, name, config, created_at) VALUES (1, 'train', '{\"capture\": \"engine\"}', '2026-12-01')",
    "INSERT INTO tasks (id, run_id, name, spec, created_at) VALUES (1, 1, 't', '{}', '2026-12-01')",
    "INSERT INTO groups (id, run_id, task_id, name, status, created_at) VALUES (1, 1, 1, 'r0', 'open', '2026-12-01')",
    "INSERT INTO rollouts (id, run_id, task_id, group_id, token, status, rewards, reward_details, meta, created_at) "
    "VALUES (1, 1, 1, 1, 'hrl-old-token', 'running', '{}', '{}', '{}', '2026-12-01')",
    "INSERT INTO adapters (id, version, name, path, loaded, digest, created_at) "
    "VALUES (1, 1, 'policy-v1', '/adapters/v1', 0, NULL, '2026-12-01')",
    "INSERT INTO adapters (id, version, name, path, loaded, digest, created_at) "
    f"VALUES (2, 2, 'policy-v2', '/adapters/v2', 1, '{'d' * 64}', '2026-12-02')",
]


def store_before_policies(path: Path) -> str:
    url = sqlite_url(path)
    upgrade(url, BEFORE_POLICIES)
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        for row in ROWS:
            connection.execute(text(row))
    engine.dispose()
    upgrade(url)  # what `harnessrl serve` and `harnessrl db upgrade` do
    return url


async def test_a_store_from_before_policies_opens_as_the_policy_policy(tmp_path: Path):
    url = store_before_policies(tmp_path / "old.db")
    store = Store.from_url(url)
    try:
        [loaded] = await store.adapters.loaded()
        assert (loaded.policy, loaded.version, loaded.name, loaded.digest) == (DEFAULT_POLICY, 2, "policy-v2", "d" * 64)
        first = await store.adapters.get(DEFAULT_POLICY, 1)
        assert first is not None and (first.path, first.loaded) == ("/adapters/v1", False)
        assert [a.version for a in await store.adapters.published(DEFAULT_POLICY)] == [1, 2]
        identity = await store.identity_for_token("hrl-old-token")
        assert identity is not None and identity.policy == DEFAULT_POLICY
        # its run keeps the default policy: another one is refused, the same one continues it
        later = await store.create_rollout("train", "t", "r0")
        assert later.policy == DEFAULT_POLICY
        [summary] = [s for s in await store.policies.summaries() if s.name == DEFAULT_POLICY]
        assert (summary.versions, summary.latest, summary.loaded) == (2, 2, (2,))
    finally:
        await store.close()


async def test_a_gateway_on_a_store_from_before_policies_serves_its_version(tmp_path, fake_engine, fake_engine_server):
    url = store_before_policies(tmp_path / "old.db")
    async for gw in start_gateway(gateway_settings(url, fake_engine_server.url), fake_engine):
        assert fake_engine.adapters.get("policy-v2") == "/adapters/v2"
        call = await served_call(gw, {"id": 1, "token": "hrl-old-token"})
        assert (call["policy"], call["policy_version"], call["engine_model"]) == (DEFAULT_POLICY, 2, "policy-v2")
        published = await gw.http.post("/admin/adapters", json={"version": 3, "path": "/adapters/v3"})
        assert published.status_code == 200 and published.json()["name"] == "policy-v3"
