"""Policies on the control plane: every policy the server knows (``GET /admin/policies``, ``/api/policies``)
and one policy's versions (``GET /api/policies/{policy}``): digest, proof, the engines holding it, the mean
reward of the rollouts it served and its held-out pass@1 (``store.policies``, ``store.evaluation``)."""

from __future__ import annotations

from pydantic import BaseModel

from contracts.publication import PolicyName
from gateway.api.protocol import Timestamp
from gateway.policy.registry import PolicyRegistry
from gateway.state import AdminStateDep, GatewayState
from store.passk import policy_results
from store.policies import adapter_name
from store.records import StoredAdapter


class PolicySummaryView(BaseModel):
    """One policy the server knows."""

    policy: str
    current_version: int  # the version new rollouts of it are served (0: the base model)
    loaded: dict[int, str]  # versions this gateway's engines hold: version -> engine adapter name
    digests: dict[int, str] = {}
    published: int  # versions published in the store
    runs: list[str]  # runs bound to it
    live_users: list[str]  # users whose live keys serve it
    engines: dict[str, list[int]] = {}  # engine URL -> the versions of it that engine holds


class PolicyVersionView(BaseModel):
    version: int  # 0: the base model
    name: str  # the engine's adapter name (the base model's for version 0)
    digest: str | None = None
    published_at: Timestamp | None = None
    loaded: bool  # the engines hold it now
    engines: list[str] = []  # URLs of the engines holding it
    proven: bool | None = None  # every engine passed its probe at publication (None: no probe was sent)
    rollouts: int = 0  # finished unpinned rollouts it served first
    reward_mean: float | None = None  # their mean reward
    eval_rollouts: int = 0  # pinned (held-out) rollouts of it
    pass_at_1: float | None = None
    pass_at_k: float | None = None
    k: int | None = None


class PolicyDetail(BaseModel):
    policy: str
    current_version: int
    runs: list[str]
    live_users: list[str]
    versions: list[PolicyVersionView]  # the base model first, then by version


async def list_policies(state: AdminStateDep) -> list[PolicySummaryView]:
    """Every policy the server knows: bound to a run or a live key, with or without versions."""
    policies = await state.ensure_policies()
    summaries = {s.name: s for s in await state.store.policies.summaries()}
    views = []
    for name in sorted({*summaries, *policies.names()}):
        registry, summary = policies.get(name), summaries.get(name)
        views.append(
            PolicySummaryView(
                policy=name,
                current_version=registry.current_version,
                loaded=registry.loaded(),
                digests=registry.digests(),
                published=summary.versions if summary else 0,
                runs=list(summary.runs) if summary else [],
                live_users=list(summary.live_users) if summary else [],
                engines={url: sorted(held) for url, held in _engines_holding(state, registry).items()},
            )
        )
    return views


async def get_policy(policy: PolicyName, state: AdminStateDep) -> PolicyDetail:
    """One policy's versions with what each did; 404 naming the known policies."""
    registry = await state.known_policy(policy)
    summary = next(s for s in await state.store.policies.summaries() if s.name == policy)
    rewards = await state.store.policies.trained_rewards(policy)
    held_out = {r.version: r for r in policy_results(await state.store.evaluations.policy_task_counts(policy))}
    holding = _engines_holding(state, registry)
    published = {a.version: a for a in await state.store.adapters.published(policy)}
    versions = []
    for version in sorted({0, *published, *rewards, *held_out}):
        adapter = published.get(version)
        count, reward = rewards.get(version, (0, None))
        result = held_out.get(version)
        versions.append(
            PolicyVersionView(
                version=version,
                name=adapter_name(policy, version) if version else registry.base_model,
                digest=adapter.digest if adapter else None,
                published_at=adapter.created_at if adapter else None,
                loaded=version in registry.loaded(),
                engines=sorted(url for url, held in holding.items() if version in held),
                proven=_proven(adapter),
                rollouts=count,
                reward_mean=reward,
                eval_rollouts=result.n if result else 0,
                pass_at_1=result.pass_at_1 if result else None,
                pass_at_k=result.pass_at_k if result else None,
                k=result.k if result else None,
            )
        )
    return PolicyDetail(
        policy=policy,
        current_version=registry.current_version,
        runs=list(summary.runs),
        live_users=list(summary.live_users),
        versions=versions,
    )


def _engines_holding(state: GatewayState, registry: PolicyRegistry) -> dict[str, set[int]]:
    """Engine URL -> the versions (adapters) of ``registry``'s policy it holds."""
    loaded = registry.loaded()
    return {
        engine["url"]: {v for v, n in loaded.items() if v and n in engine["models"]}
        for engine in state.engine.engines()
    }


def _proven(adapter: StoredAdapter | None) -> bool | None:
    if adapter is None or not adapter.proof:
        return None
    return all(answer.get("passed", False) for answer in adapter.proof)
