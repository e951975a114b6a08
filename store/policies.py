"""Policies: named lineages of LoRA adapters over the server's one base model (``pi``, ``opencode``, ``ada``).

A policy has its own versions (engine adapters named ``<policy>-v<N>``), proofs, pins, learner and
promotion. A run trains and is served one policy (its config's ``policy``, settled by its first rollout);
a live key serves its run's policy; a call with neither is served the default policy, ``policy`` (the
one lineage of a store written before policies had names). Names are safe identifiers: they become
engine adapter names, folder names and metric labels, so the grammar is narrow on purpose.

``Policies`` lists what the store knows of each: the runs bound to it, its versions, its live keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.records import RolloutStatus
from store.tables import Adapter, Call, LiveKey, Rollout, Run

DEFAULT_POLICY = "policy"
MAX_POLICY_NAME = 40
# lower-case letters, digits, '-' and '_', starting with a letter; never ending in -v<digits> (that
# would read as another policy's adapter name) and never a pin's keyword.
POLICY_NAME = r"^[a-z][a-z0-9_-]{0,39}$"
_NAME = re.compile(POLICY_NAME)
_VERSIONED = re.compile(r"-v[0-9]+$")
RESERVED = frozenset({"base", "latest"})
ADAPTER_NAME = re.compile(r"^(?P<policy>[a-z][a-z0-9_-]{0,39})-v(?P<version>[1-9][0-9]{0,9})$")


class InvalidPolicyName(ValueError):
    """A policy name outside the grammar; the message says what is allowed."""


def check_policy_name(name: str) -> str:
    """``name`` when it is a safe policy name, else InvalidPolicyName naming the rule it breaks."""
    if not _NAME.fullmatch(name) or _VERSIONED.search(name) or name in RESERVED:
        raise InvalidPolicyName(
            f"{name!r} is not a policy name: use 1-{MAX_POLICY_NAME} lower-case letters, digits, '-' or '_', "
            f"starting with a letter, not ending in -v<N>, and neither 'base' nor 'latest' (e.g. pi, opencode, ada)"
        )
    return name


def adapter_name(policy: str, version: int) -> str:
    """The engine's name of a policy version: ``<policy>-v<N>`` (never reused: vLLM keys its prefix cache by it)."""
    return f"{policy}-v{version}"


def parse_adapter_name(name: str) -> tuple[str, int] | None:
    """(policy, version) of an engine adapter name, or None when ``name`` is not one."""
    found = ADAPTER_NAME.fullmatch(name)
    return None if found is None else (found["policy"], int(found["version"]))


# A pin (evaluation, promotion): base | latest (of the run's policy) | <policy>-v<N> | <policy>@base|latest|v<N>
_VERSION = r"[1-9][0-9]{0,9}"
POLICY_PIN = rf"^(base|latest|[a-z][a-z0-9_-]{{0,39}}(-v{_VERSION}|@(base|latest|v{_VERSION})))$"
_PIN = re.compile(POLICY_PIN)
LATEST = -1  # a pin's version: the policy's current one when the pin is resolved


@dataclass(frozen=True)
class Pin:
    policy: str | None  # None: the run's own policy
    version: int  # 0: the base model; LATEST: the current version when resolved


def parse_pin(pin: str) -> Pin:
    """The policy and version a pin names; InvalidPolicyName for anything else."""
    if not _PIN.fullmatch(pin):
        raise InvalidPolicyName(
            f"{pin!r} is not a policy pin: use base, latest, <policy>@latest, <policy>@v<N>, <policy>@base "
            f"or <policy>-v<N> (e.g. pi@latest, opencode@v3)"
        )
    if pin in ("base", "latest"):
        return Pin(None, 0 if pin == "base" else LATEST)
    if "@" in pin:
        name, what = pin.split("@", 1)
        version = 0 if what == "base" else LATEST if what == "latest" else int(what[1:])
        return Pin(check_policy_name(name), version)
    name, version = parse_adapter_name(pin) or ("", 0)
    return Pin(check_policy_name(name), version)


def run_policy(run_config: dict | None) -> str:
    """The policy a run trains and is served (runs made before policies had names: the default)."""
    return (run_config or {}).get("policy") or DEFAULT_POLICY


@dataclass(frozen=True)
class PolicySummary:
    """What the store knows of one policy."""

    name: str
    runs: tuple[str, ...]  # runs bound to it (their rollouts are served it)
    live_users: tuple[str, ...]  # users whose live keys' runs are bound to it
    versions: int  # versions published
    latest: int  # its newest published version (0: none yet, the base model serves it)
    loaded: tuple[int, ...]  # versions the engines hold


class Policies:
    """Every policy the store knows: bound to a run or a live key, with or without versions."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self.sessions = sessions

    async def names(self) -> list[str]:
        return [summary.name for summary in await self.summaries()]

    async def summaries(self) -> list[PolicySummary]:
        async with self.sessions() as session:
            runs = (await session.execute(select(Run.name, Run.config))).all()
            keys = (await session.execute(select(LiveKey.user_name, LiveKey.run_id, Run.config).join(Run))).all()
            versions = (
                await session.execute(
                    select(Adapter.policy, func.count(), func.max(Adapter.version)).group_by(Adapter.policy)
                )
            ).all()
            loaded = (await session.execute(select(Adapter.policy, Adapter.version).where(Adapter.loaded))).all()
        bound: dict[str, list[str]] = {}
        for name, config in runs:
            if (config or {}).get("policy"):  # a run that never settled one is served the default
                bound.setdefault(run_policy(config), []).append(name)
        users: dict[str, list[str]] = {}
        for user, _, config in keys:
            users.setdefault(run_policy(config), []).append(user)
        counts = {policy: (count, latest) for policy, count, latest in versions}
        held: dict[str, list[int]] = {}
        for policy, version in loaded:
            held.setdefault(policy, []).append(version)
        names = sorted({*bound, *users, *counts, DEFAULT_POLICY})
        return [
            PolicySummary(
                name,
                tuple(sorted(bound.get(name, ()))),
                tuple(sorted(set(users.get(name, ())))),
                counts.get(name, (0, 0))[0],
                counts.get(name, (0, 0))[1] or 0,
                tuple(sorted(held.get(name, ()))),
            )
            for name in names
        ]

    async def trained_rewards(self, name: str) -> dict[int, tuple[int, float | None]]:
        """Per version of ``name``: (finished rollouts it started, their mean reward), over the policy's
        unpinned (training and live) rollouts; a rollout counts for the first version that served it."""
        first = (
            select(Call.rollout_id, func.min(Call.policy_version).label("version"))
            .where(Call.policy == name)
            .group_by(Call.rollout_id)
            .subquery()
        )
        query = (
            select(first.c.version, func.count(), func.avg(Rollout.reward))
            .join(Rollout, Rollout.id == first.c.rollout_id)
            .where(Rollout.policy == name, Rollout.pinned_version.is_(None), Rollout.status == RolloutStatus.FINISHED)
            .group_by(first.c.version)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return {version: (count, None if mean is None else float(mean)) for version, count, mean in rows}

    async def own_adapter_calls(self, name: str) -> tuple[int, int]:
        """(calls of the policy's rollouts served by an adapter, those served by the policy's own
        version's adapter: its name, and its digest where it was published with one)."""
        same_weights = or_(Adapter.digest.is_(None), Adapter.digest == Call.adapter_digest)
        own = (Adapter.policy == Call.policy) & (Adapter.version == Call.policy_version) & same_weights
        query = (
            select(func.count(), func.count(Adapter.id))
            .select_from(Call)
            .join(Rollout, Rollout.id == Call.rollout_id)
            .outerjoin(Adapter, own & (Adapter.name == Call.engine_model))
            .where(Rollout.policy == name, Call.policy_version > 0, Call.source == "policy")
        )
        async with self.sessions() as session:
            calls, served = (await session.execute(query)).one()
        return calls, served

    async def check_known(self, name: str) -> str:
        """``name`` when the store knows that policy, else UnknownPolicy naming the known ones."""
        known = await self.names()
        if name not in known:
            raise UnknownPolicy(name, known)
        return name


class UnknownPolicy(LookupError):
    """A policy the store does not know, where one is read (not started)."""

    def __init__(self, name: str, known: list[str]):
        super().__init__(
            f"no policy {name!r} on this server; known policies: {', '.join(known)} "
            f"(a run starts a policy with `harnessrl run --policy NAME`, a user with `harnessrl keys create --policy NAME`)"
        )
        self.name, self.known = name, known
