"""Published policy versions (table ``adapters``, ``store.adapters``): where each adapter lives, whether
the engines hold it, its digest, the learner's probe and the gateway's proof (``contracts.adapter_proof``).
Versions are numbered per policy (``store.policies``).

Every gateway polls which versions are loaded twice a second (``gateway.policy.follower``). That poll
reads three short columns (``loaded_versions``) inline on a SQLite file (``store.inline_reads``), else
through a Core connection; the whole records (``loaded``) are read only when a version is new to the
gateway. Through the ORM session each poll cost an idle gateway 8-15 ms of CPU.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from store.database import core_rows
from store.inline_reads import InlineReads, is_busy
from store.records import StoredAdapter, record_of
from store.tables import Adapter

LOADED_VERSIONS_SQL = "SELECT policy, version, name FROM adapters WHERE loaded"


class Adapters:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine | None = None,
        inline: InlineReads | None = None,
    ):
        """``engine``: where ``loaded_versions`` takes a Core connection (None: through ``sessions``);
        ``inline``: a SQLite file's inline reads."""
        self.sessions, self._engine, self._inline = sessions, engine, inline

    async def save(
        self,
        policy: str,
        version: int,
        name: str,
        path: str,
        loaded: bool,
        digest: str | None = None,
        probe: dict | None = None,
        proof: list[dict] | None = None,
    ) -> None:
        """Record a version (or its loaded flag); a digest, probe or proof left None keeps what is stored."""
        async with self.sessions.begin() as session:
            row = (await session.scalars(_one(policy, version))).first()
            if row is None:
                row = Adapter(policy=policy, version=version)
                session.add(row)
            row.name, row.path, row.loaded = name, path, loaded
            if digest is not None:
                row.digest = digest
            if probe is not None:
                row.probe = probe
            if proof is not None:
                row.proof = proof

    async def get(self, policy: str, version: int) -> StoredAdapter | None:
        """The published adapter of this policy's version, loaded or not."""
        async with self.sessions() as session:
            adapter = (await session.scalars(_one(policy, version))).first()
        return None if adapter is None else record_of(StoredAdapter, adapter)

    async def loaded(self, policy: str | None = None) -> list[StoredAdapter]:
        """The versions the engines hold, of one policy or (None) of every policy, by policy and version."""
        query = select(Adapter).where(Adapter.loaded.is_(True)).order_by(Adapter.policy, Adapter.version)
        if policy is not None:
            query = query.where(Adapter.policy == policy)
        async with self.sessions() as session:
            return [record_of(StoredAdapter, adapter) for adapter in (await session.scalars(query)).all()]

    async def loaded_versions(self) -> set[tuple[str, int, str]]:
        """(policy, version, adapter name) of every version the engines hold: what ``loaded`` reads,
        without the records (cheap enough to poll)."""
        if self._inline is not None:
            try:
                return {tuple(row) for row in self._inline.rows(LOADED_VERSIONS_SQL)}
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
        query = select(Adapter.policy, Adapter.version, Adapter.name).where(Adapter.loaded.is_(True))
        return {tuple(row) for row in await core_rows(self._engine, self.sessions, query)}

    async def published(self, policy: str) -> list[StoredAdapter]:
        """Every version of a policy, loaded or not, oldest first."""
        query = select(Adapter).where(Adapter.policy == policy).order_by(Adapter.version)
        async with self.sessions() as session:
            return [record_of(StoredAdapter, adapter) for adapter in (await session.scalars(query)).all()]


def _one(policy: str, version: int):
    return select(Adapter).where(Adapter.policy == policy, Adapter.version == version)
