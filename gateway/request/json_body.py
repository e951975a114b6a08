"""JSON bodies: sent as JSON, an object, valid UTF-8, not nested beyond what a request needs.

The size limit is the ``BodyLimit`` middleware's (``gateway.boundary``: checked while the body streams in). The model
endpoints read their body here; the REST and admin routes, whose bodies FastAPI parses, check the
parsed body with the ``refuse_deep_json`` dependency. A body nested too deeply for the parser, or
deeper than ``MAX_JSON_DEPTH``, is a 400, not a RecursionError later (storing or sending it back).

What parses but cannot be passed on is refused here too, as a 400 rather than a failure later: an
integer past Python's int-string limit, and a lone UTF-16 surrogate written as an escape (``"\\udfff"``
parses to a str that no UTF-8 encoder, the engine's or the store's, takes). A model body must say it is
JSON (``Content-Type: application/json``): a web page can POST ``text/plain`` across sites without
asking first, never ``application/json``, so the adhoc routes of an open gateway are out of its reach.
"""

from __future__ import annotations

import json
import re
import sys

from fastapi import Request

from gateway.errors import InvalidRequest, UnsupportedMediaType

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


# A UTF-16 surrogate as a JSON escape (\\ud800-\\udfff): only a body holding one is searched for a lone one.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def refuse_constant(name: str) -> float:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's decoder reads them, JSON has none (the store's
    JSON and PostgreSQL's refuse them), so a body carrying one is refused as invalid JSON."""
    raise InvalidRequest(f"request body is not valid JSON: {name} is no JSON number")


def parse_json_object(raw: bytes, check_depth: bool = True) -> dict:
    """``raw`` as a JSON object; ``check_depth=False`` for a route whose validation checks the depth
    itself (the chat route: ``gateway.request.validated_history``, only what is new in a rollout's history)."""
    try:
        body = json.loads(raw, parse_constant=refuse_constant)
    except UnicodeDecodeError:
        raise InvalidRequest("request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise too_deep() from None
    except ValueError:  # the only other one json.loads raises: an integer past the int-string limit
        raise too_many_digits() from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    if check_depth and json_depth_exceeds(body):
        raise too_deep()
    if SURROGATE_ESCAPE_BYTES.search(raw):
        refuse_lone_surrogates(body)
    return body


def too_many_digits() -> InvalidRequest:
    limit = sys.get_int_max_str_digits()
    return InvalidRequest(
        f"request body has an integer of more than {limit} digits; no field takes one: send a smaller number"
    )


def refuse_lone_surrogates(value) -> None:
    """400 when a string in ``value`` (keys too) holds a lone UTF-16 surrogate (iterative, no recursion)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            try:
                node.encode()
            except UnicodeEncodeError as exc:
                raise InvalidRequest(
                    f"request body has an invalid UTF-16 surrogate (\\u{ord(node[exc.start]):04x} with no "
                    f"partner) in a string; send whole characters: a pair of \\ud800-\\udbff and "
                    f"\\udc00-\\udfff escapes, or the character itself"
                ) from None


def require_json_content(request: Request) -> None:
    """415 unless the body is declared ``application/json`` (parameters such as charset allowed)."""
    declared = request.headers.get("content-type", "")
    if declared.split(";", 1)[0].strip().lower() != "application/json":
        shown = f"Content-Type {declared!r}" if declared else "no Content-Type"
        raise UnsupportedMediaType(
            f"request body was sent with {shown}; send it as JSON with Content-Type: application/json",
            code="unsupported_media_type",
        )


async def json_request_body(request: Request) -> bytes:
    """A model route's raw body, once its Content-Type says it is JSON."""
    require_json_content(request)
    return await request.body()


async def read_json_body(request: Request, check_depth: bool = True) -> dict:
    """The request body as a JSON object, or a 400 (415) naming what is wrong with it."""
    return parse_json_object(await json_request_body(request), check_depth)


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
