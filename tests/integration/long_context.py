"""The long-context tiny vLLM-CPU engine the real CLI agents run against (the `long_context_engine` fixture).

One engine for every real-agent test on vLLM: OpenCode, pi, Hermes, Claude Code and Codex. Its
context is long (Hermes refuses models under 64K; Claude Code compacts at no less than 100K) and it
caps outputs by default (Codex sends no cap), so a random model's answers stay short.
"""

from __future__ import annotations

import json
from pathlib import Path

from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.server import free_port

LONG_CONTEXT = 131072
DEFAULT_MAX_TOKENS = 64  # vLLM's --override-generation-config: for requests without max_tokens


def long_context_engine_process(model_dir: Path, log: Path) -> ManagedProcess:
    """The engine, not started yet."""
    defaults = json.dumps({"max_new_tokens": DEFAULT_MAX_TOKENS})
    launch = EngineLaunch(
        model_dir=model_dir,
        port=free_port(),
        max_model_len=LONG_CONTEXT,
        kv_cache_gib=2,
        extra_args=("--override-generation-config", defaults),
    )
    return ManagedProcess.vllm(launch, log)
