"""The gateway application factory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.admin.router import create_router as create_admin_router
from gateway.anthropic.router import create_router as create_anthropic_router
from gateway.api.rollout_tools import create_router as create_rollout_tools_router
from gateway.api.router import create_router as create_api_router
from gateway.boundary import install_boundary
from gateway.docs import install_docs
from gateway.engine.client import EngineClient, VLLMEngineClient
from gateway.engine.pool import EnginePool
from gateway.engine.proof import tolerance_for
from gateway.errors import GatewayError, install_error_handlers, store_failure
from gateway.openai.router import create_router as create_openai_router
from gateway.policy.adapters import RecoveringEngine
from gateway.policy.follower import follow
from gateway.policy.policy_set import PolicySet
from gateway.recording.capture_probe import CaptureCheckedEngine
from gateway.recording.trace_export import TraceExport
from gateway.request.json_body import refuse_deep_json
from gateway.responses.router import create_router as create_responses_router
from gateway.settings import GatewaySettings
from gateway.state import GatewayState, StateDep
from gateway.ui import create_router as create_ui_router
from store.store import Store
from store.writer import CallWriter

logger = logging.getLogger(__name__)


def create_app(
    settings: GatewaySettings, engine: EngineClient | None = None, engines: Sequence[EngineClient] | None = None
) -> FastAPI:
    """The gateway; ``engine`` replaces the vLLM HTTP client (tests pass one on a fake engine), ``engines``
    the clients of the pool (one per ``settings.engines()`` URL, in that order).

    The database must already be migrated (``harnessrl db upgrade``; ``harnessrl serve`` does it).
    """
    given = list(engines) if engines else [engine] if engine is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        store = Store.from_url(settings.database_url, rollout_budget=settings.rollout_max_stored_bytes or None)
        writer = CallWriter(store)
        writer.start()
        clients = given or [VLLMEngineClient(url, timeout_s=settings.engine_timeout_s) for url in settings.engines()]
        pool = engine_pool(settings, clients, store, lambda: state.policies)
        state = GatewayState(settings, store, writer, pool)
        app.state.gateway = state
        try:
            policies = await state.ensure_policies()
        except GatewayError as exc:  # the engine may come up later; calls retry discovery
            logger.warning("engine not ready at startup: %s", exc.message)
        else:
            await pool.check(policies.base_model)
        follows = settings.serves_adapters and settings.follow_interval_s > 0
        follower = asyncio.create_task(follow(state, settings.follow_interval_s)) if follows else None
        if settings.otlp_endpoint:
            state.trace_export = TraceExport.otlp(store, settings.otlp_endpoint)
        exporter = asyncio.create_task(state.trace_export.run()) if state.trace_export else None
        try:
            yield
        finally:
            for task in (follower, exporter):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            if state.trace_export is not None:
                await state.trace_export.close()
            await writer.stop()
            await pool.close(clients=given is None)
            await store.close()

    # No CDN pages: /docs is served from local assets, and ReDoc has no local copy.
    app = FastAPI(title="harnessrl gateway", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    # Every request: a 500 naming an error id for anything unmapped, the Host header (DNS rebinding), the
    # admin key on /api and /admin, a rollout token's caps (in flight, body timeouts), the body limit while
    # the body streams in, the SDK's retry count.
    install_boundary(app, settings)
    install_docs(app)  # Swagger UI at /docs
    app.include_router(create_openai_router())
    app.include_router(create_responses_router())
    app.include_router(create_anthropic_router())
    app.include_router(create_api_router(), dependencies=[Depends(refuse_deep_json)])
    app.include_router(create_admin_router(), dependencies=[Depends(refuse_deep_json)])
    app.include_router(create_rollout_tools_router())  # /r/{token}/v1/tools/mcp: a rollout's tool server
    app.include_router(create_ui_router())  # the trajectory viewer at /ui

    @app.get("/metrics", tags=["admin"], include_in_schema=False)
    async def metrics(state: StateDep) -> Response:
        if state.policies is not None:
            for policy in state.policies:
                state.books.metrics.policy_version.labels(policy.name).set(policy.current_version)
        if state.settings.engine_dtype is not None:
            state.books.metrics.engine_dtype.labels(state.settings.engine_dtype).set(1)
        state.books.metrics.engines(state.engine.engines())
        if state.trace_export is not None:
            export = state.trace_export
            state.books.metrics.trace_export(export.exported, export.collector.failed, export.dropped)
        return Response(state.books.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health", tags=["admin"])
    async def health(state: StateDep) -> JSONResponse:
        engine_ok = await state.engine.health()
        # A store that failed its last write (disk full, locked) cuts calls short: degraded until one succeeds.
        failed = state.writer.write_failure
        status = "store_unavailable" if failed else "ok" if engine_ok else "engine_unavailable"
        return JSONResponse(
            {
                "status": status,
                "engine": engine_ok,
                "store": failed is None,
                "store_error": None if failed is None else describe_write_failure(failed),
                "engine_dtype": state.settings.engine_dtype,
                "engine_dtype_reason": state.settings.engine_dtype_reason,
            },
            status_code=200 if status == "ok" else 503,
        )

    return app


def describe_write_failure(exc: Exception) -> str:
    """What /health (open to every caller) says of a failed write: no exception text (it may hold a path)."""
    known = store_failure(exc)
    if known is not None:
        return known.message
    return f"the last write to the store failed ({type(exc).__name__}); the gateway's log has the details"


def engine_pool(
    settings: GatewaySettings,
    clients: Sequence[EngineClient],
    store: Store,
    policies: Callable[[], PolicySet | None],
) -> EnginePool:
    """The engines behind the gateway. Each one that restarted gets its adapters back, and the call that
    found them gone is retried; one that does not return the recording fields serves no call (probed at
    start and when it returns)."""
    urls = settings.engines()
    members = [
        (
            getattr(client, "base_url", None) or urls[min(i, len(urls) - 1)],
            CaptureCheckedEngine(
                RecoveringEngine(client, store, policies, partial(tolerance_for, settings)),
                logprobs=settings.call_source == "policy",
            ),
        )
        for i, client in enumerate(clients)
    ]
    return EnginePool(
        members,
        max_in_flight=settings.engine_max_in_flight,
        max_queued=settings.engine_max_queued,
        probe_interval_s=settings.engine_probe_interval_s,
    )
