"""Routes of the OpenAI dialect, at /v1/... and per rollout at /r/{token}/v1/..."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from gateway.dialects import API_PREFIXES, CHAT, COMPLETIONS
from gateway.openai.protocol import ModelCard, ModelList
from gateway.openai.serving import OpenAIServing
from gateway.request.identity import resolve_identity
from gateway.routes import answered, open_call
from gateway.state import StateDep


async def chat_completions(request: Request, state: StateDep):
    # Parsed and validated once per new message: ResentBodies, then ValidatedHistory (nesting too).
    call = await open_call(request, state, check_depth=False, bodies=state.resent_bodies)
    return answered(state, call, await OpenAIServing(call.pipeline, state.chat_history).chat(call.raw, call.identity))


async def completions(request: Request, state: StateDep):
    call = await open_call(request, state)
    return answered(state, call, await OpenAIServing(call.pipeline).completions(call.raw, call.identity))


async def list_models(request: Request, state: StateDep) -> ModelList:
    identity = await resolve_identity(request, state.store, state.settings.require_token)
    policy = await state.ensure_policy(identity.policy)  # the caller's own policy's versions, no other's
    created = int(time.time())
    cards = [
        ModelCard(id=policy.public_name, created=created, max_model_len=state.max_model_len, root=policy.base_model)
    ]
    for version, name in sorted(policy.loaded().items()):
        if version:
            cards.append(
                ModelCard(
                    id=name, created=created, max_model_len=state.max_model_len, root=name, parent=policy.base_model
                )
            )
    return ModelList(data=cards)


def create_router() -> APIRouter:
    router = APIRouter(tags=["openai"])
    for prefix in API_PREFIXES:
        for dialect, endpoint in ((CHAT, chat_completions), (COMPLETIONS, completions)):
            for route in dialect.routes:
                router.add_api_route(f"{prefix}{route}", endpoint, methods=["POST"])
        router.add_api_route(f"{prefix}/models", list_models, methods=["GET"], response_model=ModelList)
    return router
