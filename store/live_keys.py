"""Live keys: the API key a person's own agent uses every day, each session of it a rollout by itself.

The key is shown once, when created; the store keeps its sha256 only, so a copy of the database opens
no model endpoint. A key belongs to one user and one run (``live`` unless named); its sessions are
rollouts of the task ``live-<user>``, one group each (no size: a session is never part of a GRPO group,
and it never trains without a reward). The gateway decides when a session ends (an idle gap, another
session name; ``gateway.request.live_sessions``); this module reads and moves the key's current session
with conditional updates, so two calls racing to open a session agree on one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.policies import DEFAULT_POLICY, run_policy
from store.records import GroupStatus, RolloutStatus
from store.retention import PruneFilter, Retention
from store.rewards import check_reward, set_reward
from store.run_settings import RunConflict
from store.tables import Call, Group, LiveKey, Rollout, Run, Task, utcnow

LIVE_PREFIX = "hrl-live-"  # a rollout token's prefix too, so the control plane refuses it by the same rule
LIVE_RUN = "live"
REDACTED_MODEL = "redacted"  # calls.model of a redacted session
FEEDBACK = "feedback"  # the reward component late feedback sets


def live_run(policy: str | None) -> str:
    """The run a live key goes to by default: ``live`` for the default policy, ``live-<policy>`` for another."""
    return LIVE_RUN if policy in (None, DEFAULT_POLICY) else f"{LIVE_RUN}-{policy}"


def live_task(user: str) -> str:
    return f"live-{user}"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class LiveKeyRecord:
    id: int
    user: str
    run: str
    train: bool
    idle_s: float  # seconds of silence after which a call opens a new session
    created_at: datetime
    revoked_at: datetime | None
    policy: str = DEFAULT_POLICY  # its run's policy (store.policies): what serves and trains on its sessions


@dataclass(frozen=True)
class KeySession:
    """A key as a call presents it, with the session open now (rollout id and token) if any."""

    key: LiveKeyRecord
    rollout_id: int | None
    token: str | None  # the session rollout's own token (how the gateway reads its identity)
    running: bool  # the session's rollout has not ended (an admin may have ended it)
    name: str | None  # the session name the agent sent with it
    last_call_at: float | None  # seconds since the epoch


@dataclass(frozen=True)
class LiveServing:
    """Which version serves a run's live sessions: the promoted one, and a candidate for a fraction of
    new sessions (a canary); every promotion and rollback with its reason (``history``)."""

    promoted: int = 0  # 0: the base model, until a version passes the gate
    canary: int | None = None
    canary_fraction: float = 0.0
    history: tuple[dict, ...] = ()
    policy: str = DEFAULT_POLICY  # the run's policy (store.policies): the versions are its

    def as_config(self) -> dict:
        canary = None if self.canary is None else {"version": self.canary, "fraction": self.canary_fraction}
        return {"promoted": self.promoted, "canary": canary, "history": list(self.history)}

    @classmethod
    def from_config(cls, config: dict | None) -> LiveServing:
        config = config or {}
        canary = config.get("canary") or {}
        return cls(
            config.get("promoted", 0),
            canary.get("version"),
            canary.get("fraction", 0.0),
            tuple(config.get("history", ())),
        )


@dataclass(frozen=True)
class UserSessions:
    """One user's live sessions in a run, counted (``harnessrl keys report``, ``GET /api/live``)."""

    user: str
    sessions: int
    running: int
    rewarded: int  # with a reward (feedback), ended or not
    reward_mean: float | None  # over the rewarded ones
    redacted: int  # a secret was found: never trains
    findings: dict[str, int]  # kinds of secret found -> sessions (never a value)
    unscanned: int  # ended, not scanned yet
    trainable: int  # ready for a learner (ended, opted in, scanned clean, rewarded)
    trained: int  # consumed by a learner step
    last_reward_at: str | None  # when feedback last arrived (ISO 8601)


@dataclass(frozen=True)
class Forgotten:
    keys: int
    rollouts: int  # sessions deleted, with their calls
    calls: int


class LiveKeys:
    """Live keys and their sessions (SQL only)."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], retention: Retention, scrub: Callable[[], Awaitable[None]]
    ) -> None:
        """``scrub``: after a forget, the deleted rows gone from the database's files too (``Store.scrub``)."""
        self.sessions, self.retention, self.scrub = sessions, retention, scrub

    async def create(
        self, user: str, run: str = LIVE_RUN, train: bool = False, idle_s: float = 1800.0, policy: str | None = None
    ):
        """A new key for ``user``: returns (the key, shown only now; its record). ``policy`` binds a new
        run to that policy (a new name starts it); RunConflict when the run has another."""
        key = LIVE_PREFIX + secrets.token_urlsafe(24)
        async with self.sessions.begin() as session:
            run_row = await session.scalar(select(Run).where(Run.name == run))
            if run_row is None:
                run_row = Run(name=run, config={"policy": policy or DEFAULT_POLICY})
                session.add(run_row)
                await session.flush()
            elif policy is not None and run_policy(run_row.config) != policy:
                raise RunConflict(
                    f"run {run!r} serves policy {run_policy(run_row.config)!r}, not {policy!r}: give the key "
                    f"another run (default for --policy {policy}: {live_run(policy)})",
                    "policy",
                )
            row = LiveKey(user_name=user, run_id=run_row.id, digest=key_digest(key), train=train, idle_s=idle_s)
            session.add(row)
            await session.flush()
            return key, _record(row, run, run_policy(run_row.config))

    async def list(self, user: str | None = None) -> list[LiveKeyRecord]:
        query = select(LiveKey, Run.name, Run.config).join(Run, Run.id == LiveKey.run_id).order_by(LiveKey.id)
        if user is not None:
            query = query.where(LiveKey.user_name == user)
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [_record(row, run, run_policy(config)) for row, run, config in rows]

    async def revoke(self, user: str) -> list[int]:
        """Revoke every key of ``user`` still valid; returns their ids (refused from the next call on)."""
        async with self.sessions.begin() as session:
            ids = list(
                (
                    await session.scalars(
                        select(LiveKey.id).where(LiveKey.user_name == user, LiveKey.revoked_at.is_(None))
                    )
                ).all()
            )
            if ids:
                await session.execute(update(LiveKey).where(LiveKey.id.in_(ids)).values(revoked_at=utcnow()))
        return ids

    async def forget(self, user: str) -> Forgotten:
        """Everything of ``user``: their keys revoked first (a call in flight opens no new session), their
        open sessions ended, every session's rollout and calls deleted, then the keys themselves."""
        keys = await self.list(user)
        await self.revoke(user)
        async with self.sessions.begin() as session:
            tasks = select(Task.id).where(Task.name == live_task(user))
            await session.execute(
                update(Rollout)
                .where(Rollout.task_id.in_(tasks), Rollout.status == RolloutStatus.RUNNING)
                .values(status=RolloutStatus.CANCELLED, error="its user was forgotten", finished_at=utcnow())
            )
        rollouts = calls = 0
        for run in sorted({key.run for key in keys}):
            pruned = await self.retention.prune(PruneFilter(run=run, task=live_task(user)))
            rollouts, calls = rollouts + pruned.rollouts, calls + pruned.calls
        async with self.sessions.begin() as session:
            await session.execute(delete(LiveKey).where(LiveKey.user_name == user))
        await self.scrub()
        return Forgotten(len(keys), rollouts, calls)

    async def presented(self, key: str) -> KeySession | None:
        """The key a call presents and its open session; None for a key that is not one."""
        query = (
            select(LiveKey, Run.name, Run.config, Rollout.token, Rollout.status)
            .join(Run, Run.id == LiveKey.run_id)
            .outerjoin(Rollout, Rollout.id == LiveKey.session_rollout_id)
            .where(LiveKey.digest == key_digest(key))
        )
        async with self.sessions() as session:
            found = (await session.execute(query)).first()
        if found is None:
            return None
        row, run, config, token, status = found
        running = status == RolloutStatus.RUNNING
        record = _record(row, run, run_policy(config))
        return KeySession(record, row.session_rollout_id, token, running, row.session_name, row.last_call_at)

    async def move_session(self, key_id: int, was: int | None, now: int, name: str | None, at: float) -> bool:
        """Make rollout ``now`` the key's session if its session is still ``was`` (False: another call
        moved it first)."""
        held = LiveKey.session_rollout_id.is_(None) if was is None else LiveKey.session_rollout_id == was
        async with self.sessions.begin() as session:
            done = await session.execute(
                update(LiveKey)
                .where(LiveKey.id == key_id, held)
                .values(session_rollout_id=now, session_name=name, last_call_at=at)
            )
        return done.rowcount == 1

    async def touch(self, key_id: int, rollout_id: int, at: float) -> None:
        """A call of the open session: its silence starts again."""
        async with self.sessions.begin() as session:
            await session.execute(
                update(LiveKey)
                .where(LiveKey.id == key_id, LiveKey.session_rollout_id == rollout_id)
                .values(last_call_at=at)
            )

    async def latest_session(self, user: str) -> int | None:
        """The rollout of ``user``'s most recent session, open or ended (what a hook scores)."""
        query = (
            select(Rollout.id)
            .join(Task, Task.id == Rollout.task_id)
            .where(Task.name == live_task(user))
            .order_by(Rollout.id.desc())
            .limit(1)
        )
        async with self.sessions() as session:
            return await session.scalar(query)

    async def serving(self, run: str) -> LiveServing:
        async with self.sessions() as session:
            config = await session.scalar(select(Run.config).where(Run.name == run))
        serving = LiveServing.from_config((config or {}).get("live"))
        return dataclasses.replace(serving, policy=run_policy(config))

    async def serve(self, run: str, version: int, why: str, canary: tuple[int, float] | None = None) -> LiveServing:
        """Serve ``version`` to the run's new live sessions (a promotion or a rollback, ``why`` kept in
        its history), with ``canary`` (candidate version, fraction of new sessions) or none."""
        async with self.sessions.begin() as session:
            row = await session.scalar(select(Run).where(Run.name == run).with_for_update())
            if row is None:
                raise LookupError(f"run {run!r} has no live key: create one with `harnessrl keys create --run {run}`")
            now = LiveServing.from_config((row.config or {}).get("live"))
            entry = {"version": version, "at": utcnow().isoformat(), "why": why}
            history = (*now.history, entry) if version != now.promoted else now.history
            serving = LiveServing(version, *(canary or (None, 0.0)), history=history, policy=run_policy(row.config))
            row.config = {**(row.config or {}), "live": serving.as_config()}
        return serving

    async def report(self, run: str) -> list[UserSessions]:
        """Every user's sessions of ``run``: how many, rewarded, excluded and why, trained."""
        query = (
            select(Rollout.status, Rollout.reward, Rollout.meta, Rollout.reward_details, Group.status)
            .join(Run, Run.id == Rollout.run_id)
            .join(Group, Group.id == Rollout.group_id)
            .where(Run.name == run)
        )
        async with self.sessions() as session:
            rows = [r for r in (await session.execute(query)).all() if "live" in (r[2] or {})]
        users: dict[str, list] = {}
        for row in rows:
            users.setdefault(row[2]["live"]["user"], []).append(row)
        return [_user_sessions(user, found) for user, found in sorted(users.items())]

    async def unscanned(self, run: str) -> list[tuple[int, str | None]]:
        """Ended sessions of ``run`` not scanned for secrets yet, oldest first: rollout id and the session
        name the agent gave (scanned too)."""
        query = (
            select(Rollout.id, Rollout.meta)
            .join(Run, Run.id == Rollout.run_id)
            .where(Run.name == run, Rollout.status != RolloutStatus.RUNNING)
            .order_by(Rollout.id)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [
            (i, meta["live"].get("session"))
            for i, meta in rows
            if "live" in (meta or {}) and "privacy" not in meta["live"]
        ]

    async def mark_scanned(self, rollout_id: int, findings: list[str]) -> None:
        """Record a session's scan: the kinds of secret found (never a value). With findings the session
        is excluded from training and redacted: every call's bodies replaced, its token ids and log-probs
        emptied (the ids would decode back to the secret), in the same transaction."""
        async with self.sessions.begin() as session:
            rollout = await session.get(Rollout, rollout_id, with_for_update=True)
            privacy = {"scanned_at": utcnow().isoformat(), "findings": findings, "redacted": bool(findings)}
            live = {**rollout.meta["live"], "privacy": privacy}
            if findings:  # the session's name came from a header the agent sent
                live["session"] = None
                await session.execute(
                    update(LiveKey).where(LiveKey.session_rollout_id == rollout_id).values(session_name=None)
                )
            rollout.meta = {**rollout.meta, "live": live}
            if findings:
                marker = {"redacted": f"a secret was found ({', '.join(findings)}); this session never trains"}
                await session.execute(
                    update(Call)
                    .where(Call.rollout_id == rollout_id)
                    .values(
                        request=marker,
                        response=marker,
                        model=REDACTED_MODEL,  # the name the agent sent: a credential may hide there too
                        prompt_ids=b"",
                        prompt_offset=0,
                        prompt_roles=None,
                        output_ids=b"",
                        output_logprobs=None,
                    )
                )
            await _settle(session, rollout)

    async def feedback(self, rollout_id: int, score: float, note: str | None) -> bool:
        """Late feedback on a live session, ended or not: the ``feedback`` reward component (and its
        note). False when the rollout is no live session: a task's rewards are final when it ends."""
        check_reward(FEEDBACK, score)  # refused before the row is read
        async with self.sessions.begin() as session:
            rollout = await session.get(Rollout, rollout_id, with_for_update=True)
            if rollout is None or not (rollout.meta or {}).get("live"):
                return False
            set_reward(rollout, FEEDBACK, score)  # ended or not: a live session takes late feedback
            detail = {"note": (note or "")[:2000], "at": utcnow().isoformat()}
            rollout.reward_details = {**(rollout.reward_details or {}), FEEDBACK: detail}
            await _settle(session, rollout)
        return True


async def _settle(session: AsyncSession, rollout: Rollout) -> None:
    """A session becomes trainable (its group ready, for a learner with ``[batch] advantage = "session"``)
    once it has ended, its user opted in, it was scanned without a finding and it has a reward."""
    live = rollout.meta["live"]
    privacy = live.get("privacy") or {}
    trainable = live.get("train") and privacy and not privacy.get("findings") and rollout.reward is not None
    if rollout.status == RolloutStatus.RUNNING or not trainable:
        return
    await session.execute(
        update(Group)
        .where(Group.id == rollout.group_id, Group.status == GroupStatus.OPEN)
        .values(status=GroupStatus.READY, ready_at=utcnow())
    )


def _user_sessions(user: str, rows: list) -> UserSessions:
    rewards = [r.reward for r in rows if r.reward is not None]
    privacy = [(r.status, r.meta["live"].get("privacy")) for r in rows]
    findings: dict[str, int] = {}
    for _, scan in privacy:
        for kind in (scan or {}).get("findings", []):
            findings[kind] = findings.get(kind, 0) + 1
    arrivals = [d[FEEDBACK]["at"] for d in (r.reward_details or {} for r in rows) if FEEDBACK in d]
    return UserSessions(
        user=user,
        sessions=len(rows),
        running=sum(r.status == RolloutStatus.RUNNING for r in rows),
        rewarded=len(rewards),
        reward_mean=sum(rewards) / len(rewards) if rewards else None,
        redacted=sum(bool((scan or {}).get("redacted")) for _, scan in privacy),
        findings=findings,
        unscanned=sum(status != RolloutStatus.RUNNING and scan is None for status, scan in privacy),
        trainable=sum(r[4] == GroupStatus.READY for r in rows),
        trained=sum(r[4] == GroupStatus.CONSUMED for r in rows),
        last_reward_at=max(arrivals, default=None),
    )


def _record(row: LiveKey, run: str, policy: str) -> LiveKeyRecord:
    return LiveKeyRecord(row.id, row.user_name, run, row.train, row.idle_s, row.created_at, row.revoked_at, policy)
