"""Gateway settings (the composition root builds them from CLI flags and the environment)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GatewaySettings:
    database_url: str  # sqlite+aiosqlite:///... or postgresql+asyncpg://...
    engine_url: str = "http://127.0.0.1:8100"  # vLLM's OpenAI server
    public_model: str = "policy"  # the name agents ask for
    require_token: bool = False  # refuse calls without a rollout token (else: the adhoc run)
    public_url: str | None = None  # how agents reach this gateway, when behind a proxy
    engine_timeout_s: float = 600.0  # one engine call, end to end
    max_body_bytes: int = 32 * 1024 * 1024  # larger bodies get a 413
    base_model: str | None = None  # the engine's base model name; discovered from /v1/models if None
    # The model folder (chat template + tokenizer) for tito capture; discovered from the engine's
    # /v1/models "root" when it is a local folder.
    model_dir: str | None = None
    # Guards writes to /api (rollouts, rewards) and /admin (adapters): the runner and learner hold
    # it, agents in sandboxes do not. None leaves them open (a single trusted user on loopback).
    admin_key: str | None = None
    max_staleness: int = 2  # adapter versions kept loaded beyond the current one: max_staleness + 1
