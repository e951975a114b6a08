"""Serve an installed OpenEnv environment: ``python -m harnesses.openenv.serve MODULE:CLASS --port PORT``.

The environment class (an ``openenv.core.env_server`` ``Environment``, MCP tools or not) is served by
OpenEnv's own ``create_app`` (HTTP, WebSocket sessions, the Task API, ``/mcp``) on 127.0.0.1 only, with
OpenEnv's web interface off. ``--tasks openenv:MODULE:CLASS`` starts one of these per rollout.
"""

from __future__ import annotations

import argparse
import importlib
import os


def environment_class(spec: str):
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{spec!r} is not MODULE:CLASS")
    return getattr(importlib.import_module(module_name), attribute)


def build_app(spec: str, max_sessions: int = 8):
    os.environ.setdefault("ENABLE_WEB_INTERFACE", "false")
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    cls = environment_class(spec)
    name = getattr(cls, "ENV_NAME", None) or cls.__name__.removesuffix("Environment").lower() or "env"
    return create_app(cls, CallToolAction, CallToolObservation, env_name=name, max_concurrent_envs=max_sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("environment", help="MODULE:CLASS of an OpenEnv Environment")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=8)
    args = parser.parse_args()
    import uvicorn

    try:
        app = build_app(args.environment, args.max_sessions)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SystemExit(f"cannot load the environment {args.environment}: {type(exc).__name__}: {exc}") from None
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
