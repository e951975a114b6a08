"""Routes of the Responses dialect, at /v1/responses and per rollout at /r/{token}/v1/responses."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from gateway.identity import resolve_identity
from gateway.openai.router import CALL_ID_HEADER
from gateway.responses.replay import response_events
from gateway.responses.serving import ResponsesServing
from gateway.state import StateDep, read_json_body


async def create_response(request: Request, state: StateDep):
    raw = await read_json_body(request, state.settings.max_body_bytes)
    identity = await resolve_identity(request, state.store, state.settings.require_token)
    served = await ResponsesServing(await state.pipeline()).create(raw, identity)
    headers = {CALL_ID_HEADER: str(served.call_id)}
    if served.stream:
        return StreamingResponse(response_events(served.response), media_type="text/event-stream",
                                 headers=headers)
    return JSONResponse(served.response.model_dump(mode="json"), headers=headers)


def create_router() -> APIRouter:
    router = APIRouter(tags=["responses"])
    for prefix in ("/v1", "/r/{token}/v1"):
        router.add_api_route(f"{prefix}/responses", create_response, methods=["POST"])
    return router
