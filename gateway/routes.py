"""What every dialect's model route shares: opening a call (its body, who it belongs to, the pipeline)
and delivering the recorded answer (JSON, or a stream passed through as the engine samples it), tagged
``undelivered`` when it never reaches the client."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from gateway.delivery.tracking import UNDELIVERED, Delivery, EventStream, JSONBody
from gateway.errors import GatewayError
from gateway.recording.pipeline import ChatPipeline
from gateway.recording.streaming import ServedCall, StreamedAnswer
from gateway.request.identity import resolve_identity
from gateway.request.json_body import json_request_body, parse_json_object, read_json_body
from gateway.request.resent_bodies import ResentBodies
from gateway.state import GatewayState
from store.records import RolloutIdentity

CALL_ID_HEADER = "x-harnessrl-call-id"
ROLLOUT_ID_HEADER = "x-harnessrl-rollout-id"  # a live key's session: what feedback names later


@dataclass(frozen=True)
class OpenedCall:
    raw: dict  # the client's body, parsed
    identity: RolloutIdentity
    pipeline: ChatPipeline


async def open_call(
    request: Request, state: GatewayState, check_depth: bool = True, bodies: ResentBodies | None = None
) -> OpenedCall:
    """The body (size-limited JSON, declared as such), then the caller's identity, then the pipeline:
    every model route's start. ``check_depth=False``: the route's validation checks the body's nesting
    itself. ``bodies``: the body is parsed against its rollout's last one (what it resends is not
    parsed again)."""
    if bodies is None:
        raw = await read_json_body(request, check_depth)
        identity = await resolve_identity(request, state.store, state.settings.require_token)
    else:
        body = await json_request_body(request)
        try:
            identity = await resolve_identity(request, state.store, state.settings.require_token)
        except GatewayError:
            parse_json_object(body, check_depth)  # a bad body is refused first, as on every route
            raise
        raw = bodies.parse(body, identity.rollout_id, check_depth)
    return OpenedCall(raw, identity, await state.pipeline())


def answered(state: GatewayState, call: OpenedCall, served: ServedCall | StreamedAnswer) -> Delivery:
    """A dialect serving's answer to ``call`` as the route's response: every model route ends here."""
    if isinstance(served, StreamedAnswer):
        return streamed(served, call.identity.rollout_id)
    return delivered(state, served, call.identity.rollout_id)


def delivered(state: GatewayState, served: ServedCall, rollout_id: int) -> Delivery:
    """The recorded call's JSON response, tagged if it never reaches the client."""
    headers = {CALL_ID_HEADER: str(served.call_id), ROLLOUT_ID_HEADER: str(rollout_id)}
    response = JSONBody(served.body, headers=headers)
    return Delivery(response, lambda: state.writer.add_tag(served.call_id, UNDELIVERED))


def streamed(answer: StreamedAnswer, rollout_id: int) -> Delivery:
    """A call streamed through: its events as they come; cut short, it is recorded ``undelivered``
    (the call id goes out in the stream, once the call exists)."""
    response = EventStream(answer.events, headers={ROLLOUT_ID_HEADER: str(rollout_id)})
    return Delivery(response, lambda: answer.call.undelivered(UNDELIVERED))
