"""The model routes, dispatched straight to their endpoints: a model call skips FastAPI's per-request work.

A request to a model route (chat, completions, messages, responses) otherwise passes Starlette's
exception middleware, FastAPI's exit-stack middleware, the router's walk over every route and FastAPI's
request handler with its dependency solving: about a fifth of a recorded call's CPU. Those endpoints
take the request and the gateway's state and return a Response, so this layer, the innermost of the
boundary, finds them by path in a table built from the app's own routes (the routers stay their one
owner, and /docs lists them as before), calls them, and answers what they raise with the app's own
exception handlers (``gateway.errors.install_error_handlers``). Every other request goes on to the app.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.dialects import API_PREFIXES, ROLLOUT_PREFIX, rollout_path

Endpoint = Callable  # async (request, state) -> Response
TOKEN_PREFIX = f"{ROLLOUT_PREFIX}{{token}}/"  # "/r/{token}/": a rollout's routes, as the routers declare them


class ModelLane:
    def __init__(self, app: ASGIApp):
        self.app = app
        self._endpoints: dict[str, Endpoint] | None = None  # route path (as declared) -> endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request, app.state.gateway)
        except Exception as exc:
            handler = handler_for(app.exception_handlers, exc)
            if handler is None:
                raise  # the boundary's ServerErrors answers it
            response = handler(request, exc)
            response = await response if inspect.isawaitable(response) else response
        await response(scope, receive, send)

    def _endpoint(self, scope: Scope) -> Endpoint | None:
        """The model endpoint serving this path (its token put in ``path_params``), or None."""
        if self._endpoints is None:
            self._endpoints = model_endpoints(scope["app"].routes)
        path: str = scope["path"]
        if not path.startswith(ROLLOUT_PREFIX):
            return self._endpoints.get(path)
        named = rollout_path(path)
        endpoint = None if named is None else self._endpoints.get(TOKEN_PREFIX + named[1])
        if endpoint is not None:
            scope["path_params"] = {"token": named[0]}
        return endpoint


def model_endpoints(routes) -> dict[str, Endpoint]:
    """The POST routes under the model prefixes whose endpoint is ``(request, state)`` and that have no
    dependencies of their own: what this lane may call directly, by declared path."""
    table = {}
    for route in routes:
        if not isinstance(route, APIRoute) or route.methods != {"POST"} or route.dependencies:
            continue
        if not any(route.path.startswith(prefix + "/") for prefix in API_PREFIXES):
            continue
        if list(inspect.signature(route.endpoint).parameters) == ["request", "state"]:
            table[route.path] = route.endpoint
    return table


def handler_for(handlers: dict, exc: Exception):
    """The app's handler for ``exc`` (the nearest class in its MRO that has one), as Starlette looks it up."""
    for cls in type(exc).__mro__:
        if cls in handlers:
            return handlers[cls]
    return None
