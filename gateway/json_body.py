"""JSON bodies: an object, valid UTF-8, not nested beyond what a request needs.

The size limit is the ``Boundary`` middleware's (checked while the body streams in). The model
endpoints read their body here; the REST and admin routes, whose bodies FastAPI parses, check the
parsed body with the ``refuse_deep_json`` dependency. A body nested too deeply for the parser, or
deeper than ``MAX_JSON_DEPTH``, is a 400, not a RecursionError later (storing or sending it back).
"""

from __future__ import annotations

import json

from fastapi import Request

from gateway.errors import InvalidRequest

# Arrays and objects inside one another; a request with tool schemas nests a few dozen deep.
MAX_JSON_DEPTH = 128


def too_deep() -> InvalidRequest:
    return InvalidRequest(f"request body is nested more than {MAX_JSON_DEPTH} levels deep; send a flatter body")


def json_depth_exceeds(value, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep (iterative: no recursion of its own)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_json_object(raw: bytes, check_depth: bool = True) -> dict:
    """``raw`` as a JSON object; ``check_depth=False`` for a route whose validation checks the depth
    itself (the chat route: ``gateway.validated_history``, only what is new in a rollout's history)."""
    try:
        body = json.loads(raw)
    except UnicodeDecodeError:
        raise InvalidRequest("request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise too_deep() from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    if check_depth and json_depth_exceeds(body):
        raise too_deep()
    return body


async def read_json_body(request: Request, check_depth: bool = True) -> dict:
    """The request body as a JSON object, or a 400 naming what is wrong with it."""
    return parse_json_object(await request.body(), check_depth)


async def refuse_deep_json(request: Request) -> None:
    """Dependency of routes whose body FastAPI parses: that body nests at most ``MAX_JSON_DEPTH`` deep."""
    if getattr(request.scope.get("route"), "body_field", None) is None:
        return
    try:
        body = await request.json()  # parsed already for the route: Starlette keeps it
    except Exception:  # not JSON: the route's own parsing answers that
        return
    if json_depth_exceeds(body):
        raise too_deep()
