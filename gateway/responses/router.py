"""Routes of the Responses dialect, at /v1/responses and per rollout at /r/{token}/v1/responses."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.dialects import API_PREFIXES, RESPONSES
from gateway.responses.serving import ResponsesServing
from gateway.routes import answered, open_call
from gateway.state import StateDep


async def create_response(request: Request, state: StateDep):
    call = await open_call(request, state, bodies=state.resent_inputs)  # the resent input items parsed once
    return answered(state, call, await ResponsesServing(call.pipeline).create(call.raw, call.identity))


def create_router() -> APIRouter:
    router = APIRouter(tags=["responses"])
    for prefix in API_PREFIXES:
        for route in RESPONSES.routes:
            router.add_api_route(f"{prefix}{route}", create_response, methods=["POST"])
    return router
