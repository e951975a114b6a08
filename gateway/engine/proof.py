"""The gateway's side of an adapter's proof: asking an engine for the probe's log-probs and judging them.

The probe, the digest and the judging rule are the learner's and the gateway's shared contract
(``contracts.adapter_proof``); this module sends the probe to an engine (an ``EngineClient``), under the
adapter's name and then under the base model (the engine's own noise), and fails a publication whose
engine does not compute with the adapter (``AdapterNotApplied``, a 502 that names the fix). It lives
beside the engine clients because the pool proves an engine back from a failure before it serves again,
and the policy registry proves each engine at publication: both layers above the engines call it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING

from contracts.adapter_proof import AdapterProbe, ProbeResult, engine_logprob, judge, probe_requests, probe_tolerance
from gateway.engine.client import base_model_id
from gateway.errors import EngineError, GatewayError

if TYPE_CHECKING:
    from gateway.settings import GatewaySettings

logger = logging.getLogger(__name__)


class AdapterNotApplied(GatewayError):
    """An engine loaded the adapter but does not compute with it (the probe disagrees)."""

    status_code = 502
    type = "engine_error"

    def __init__(self, message: str):
        super().__init__(message, code="adapter_not_applied")


def tolerance_for(settings: GatewaySettings, probe: AdapterProbe) -> float:
    """A gateway's tolerance for a probe: ``--adapter-probe-tolerance``, else its engine's and the probe's dtypes."""
    return probe_tolerance(settings.engine_dtype, probe.dtype, settings.adapter_probe_tolerance)


async def prove_engine(client, url: str, name: str, probe: AdapterProbe, tolerance: float) -> ProbeResult:
    """Ask one engine (an ``EngineClient``) for the probe's log-probs under ``name``, then under its base
    model (its noise), and judge them with ``tolerance`` as the floor; ``AdapterNotApplied`` when they
    differ, an ``EngineError`` when it cannot answer with them. The two rounds are not sent together:
    a vLLM-CPU engine without harnessrl's plugin computes a base-model request batched with LoRA
    requests under an adapter once adapters were swapped (``harnessrl.engine.vllm_cpu_lora``)."""
    try:
        found = await _probe_logprobs(client, name, probe)
        base = await base_model_of(client)
        noise_found = await _probe_logprobs(client, base, probe) if base else None
        result = judge(url, found, probe, tolerance, noise_found)
    except ValueError as exc:
        raise EngineError(502, f"engine {url} cannot prove it applies {name}: {exc}") from None
    if not result.passed:
        logger.error("%s", not_applied_message(name, result))
        raise AdapterNotApplied(not_applied_message(name, result))
    return result


async def _probe_logprobs(client, model: str, probe: AdapterProbe) -> list[float]:
    answers = await asyncio.gather(*(client.completions(body) for body in probe_requests(model, probe)))
    return [engine_logprob(answer, target) for answer, target in zip(answers, probe.targets, strict=True)]


async def base_model_of(client) -> str | None:
    """The engine's base model name, None when it does not list one."""
    models = getattr(client, "models", None)
    return None if models is None else base_model_id(await models())


def not_applied_message(name: str, result: ProbeResult) -> str:
    closer = (
        "; it is closer to the base model's, so the engine serves the base model under the adapter's name"
        if result.distinguishable and result.base_mean_abs < result.mean_abs
        else ""
    )
    distance = (
        f"differ from the learner's by {result.mean_abs:.4g} nats per token on average"
        if math.isfinite(result.mean_abs)
        else "miss tokens the adapter finds likeliest (not among the engine's top log-probs)"
    )
    return (
        f"engine {result.engine} loaded {name} but does not compute with it: its log-probs of the probe "
        f"{distance} (tolerance {result.tolerance:.4g}, its own noise on the base model {result.noise:.4g}){closer}. "
        f"The previous version keeps serving. Check that the engine "
        f"runs with --enable-lora and reads the adapter folder the learner wrote (the same path on a "
        f"shared disk), or raise --adapter-probe-tolerance if its dtype is coarser than reported"
    )
