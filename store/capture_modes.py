"""The capture modes, in one place: how a run's calls are captured, set by the run's first rollout and
kept (``store.run_settings``).

    engine   vLLM renders the chat; its prompt and output token ids are recorded as it returns them
    tito     the gateway renders it and splices the exact ids sampled in every turn the agent sends
             back (tokens in, tokens out: ``gateway/tito/``)

The REST API's ``capture`` field, the CLI's ``--capture``, the store's default, evaluation and the
reports read these names from here, so a new mode is one entry in ``MODES`` (and its path in the
gateway's recording pipeline, ``gateway/recording/pipeline.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

MODES = {
    "engine": "vLLM renders the chat",
    "tito": "the gateway renders and splices the exact sampled ids of every turn the agent sends back",
}
CaptureMode = Literal[tuple(MODES)]  # the wire's type: the REST API refuses any other name
CAPTURE_MODES: tuple[str, ...] = tuple(MODES)
DEFAULT_CAPTURE = "engine"  # a run created without one, and every run settled before modes had names
TEACHER_CAPTURE = "engine"  # a teacher (litellm, solutions) is an engine of its own: nothing to splice


def capture_of(run_config: Mapping | None) -> str:
    """The capture mode a stored run config says, the default where it says none."""
    return (run_config or {}).get("capture") or DEFAULT_CAPTURE


def capture_help() -> str:
    """Every mode with what it does, as CLI help writes a choice."""
    return " or ".join(f"{name} ({what})" for name, what in MODES.items())
