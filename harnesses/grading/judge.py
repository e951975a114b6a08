"""LLM-judged rewards through litellm: any provider's model scores rollouts by a rubric.

``Judge.rollout(trajectory)`` scores one rollout; ``Judge.group(trajectories)`` scores a group's G
rollouts in one call, relative to each other (RULER-style). The model is a litellm model string
(``hosted_vllm/NAME`` with ``api_base`` at a local vLLM, ``openai/...``, ``anthropic/...``); provider
keys come from the environment as litellm reads them, and nothing secret is stored.

A judge never fails a rollout: a timeout, a provider error or an unusable answer abstains (score None,
the reason kept). Only named transient errors (rate limits, timeouts, lost connections, 5xx) are
retried. Calls run at most ``concurrency`` at once. Verdicts are cached on disk by (rubric, model,
mode, trajectory hashes): a rerun over the same trajectories asks the provider nothing. Each
judgement carries the call's tokens and cost, stored with the reward component ``judge``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harnesses.grading.rubric import (
    PROMPT_VERSION,
    BadVerdict,
    Rubric,
    Trajectory,
    group_prompt,
    group_schema,
    new_nonce,
    parse_group_verdict,
    parse_rollout_verdict,
    rollout_prompt,
    rollout_schema,
)

MODES = ("rollout", "group")
JUDGE_COMPONENT = "judge"  # the reward component's name
RETRY_DELAYS_S = (1.0, 4.0, 15.0)


@dataclass(frozen=True)
class JudgeSettings:
    model: str  # a litellm model string
    rubric: Rubric
    mode: str = "rollout"  # rollout | group
    api_base: str | None = None  # e.g. http://127.0.0.1:8100/v1 for hosted_vllm/
    concurrency: int = 4  # judge calls at once
    timeout_s: float = 120.0  # one call
    retries: int = 2  # extra attempts on transient errors
    max_tokens: int = 512  # per judged rollout
    temperature: float = 0.0
    structured: bool = True  # ask for the verdict's JSON schema (response_format)
    cache_dir: Path | None = None  # None: no cache
    retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"judge mode must be one of {MODES}, not {self.mode!r}")
        if "/" not in self.model:
            raise ValueError(
                f"--judge {self.model!r} is not a litellm model string: name the provider, e.g. "
                f"hosted_vllm/NAME (with --judge-base-url) or openai/gpt-4o-mini"
            )


@dataclass(frozen=True)
class Judgement:
    score: float | None  # None: the judge abstained
    reasons: str  # the judge's reasons, or why it abstained
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None: the provider's price is unknown to litellm
    latency_s: float = 0.0
    attempts: int = 0  # provider calls made (0: answered from the cache)
    cached: bool = False
    shared_by: int = 1  # rollouts judged in the same call (a group's G)
    abstained: bool = False

    def detail(self) -> dict:
        """What is stored with the reward component (no secret: model, tokens, cost, reasons)."""
        return asdict(self)


@dataclass(frozen=True)
class _Answer:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    attempts: int


class Judge:
    def __init__(self, settings: JudgeSettings):
        self.settings = settings
        self._limit = asyncio.Semaphore(settings.concurrency)
        self.cache = JudgeCache(settings.cache_dir) if settings.cache_dir else None

    @property
    def mode(self) -> str:
        return self.settings.mode

    async def rollout(self, trajectory: Trajectory) -> Judgement:
        """One rollout's score in [0, 1] with its reasons, or an abstention."""
        key = self._key([trajectory])
        if (hit := self._cached(key)) is not None:
            return _judgement(self.settings.model, hit["scores"][0], hit, cached=True)
        nonce = new_nonce()
        try:
            answer = await self._ask(
                rollout_prompt(self.settings.rubric, trajectory, nonce), rollout_schema(nonce), self.settings.max_tokens
            )
        except Exception as exc:  # noqa: BLE001 - any failure abstains, never fails the rollout
            return self._abstain(exc)
        try:
            scored = [parse_rollout_verdict(answer.text, nonce)]
        except BadVerdict as exc:
            return self._abstain(exc, answer)
        self._store(key, scored, answer)
        return _judgement(self.settings.model, scored[0], asdict(answer))

    async def group(self, trajectories: list[Trajectory]) -> list[Judgement]:
        """Each rollout's score relative to the others', from one judge call (all abstain on failure)."""
        size = len(trajectories)
        if size == 0:
            return []
        key = self._key(trajectories)
        if (hit := self._cached(key)) is not None:
            return [_judgement(self.settings.model, s, hit, cached=True, shared_by=size) for s in hit["scores"]]
        nonce = new_nonce()
        try:
            answer = await self._ask(
                group_prompt(self.settings.rubric, trajectories, nonce),
                group_schema(nonce, size),
                self.settings.max_tokens * size,
            )
            scored = parse_group_verdict(answer.text, nonce, size)
        except BadVerdict as exc:
            return [self._abstain(exc, answer, size)] * size
        except Exception as exc:  # noqa: BLE001
            return [self._abstain(exc, shared_by=size)] * size
        self._store(key, scored, answer)
        return [_judgement(self.settings.model, s, asdict(answer), shared_by=size) for s in scored]

    async def _ask(self, messages: list[dict], schema: dict, max_tokens: int) -> _Answer:
        litellm = litellm_module()
        retryable = (
            litellm.RateLimitError,
            litellm.Timeout,
            litellm.APIConnectionError,
            litellm.ServiceUnavailableError,
            litellm.InternalServerError,
            litellm.BadGatewayError,
        )
        settings, attempt = self.settings, 0
        kwargs = {
            "model": settings.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": settings.temperature,
            "timeout": settings.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
        }
        if settings.api_base:
            kwargs["api_base"] = settings.api_base
        if settings.structured:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": schema, "strict": True},
            }
        async with self._limit:
            while True:
                attempt += 1
                started = time.monotonic()
                try:
                    response = await asyncio.wait_for(litellm.acompletion(**kwargs), settings.timeout_s + 5.0)
                    break
                except retryable as exc:
                    if attempt > settings.retries:
                        raise _Failed(exc, attempt) from None
                    await asyncio.sleep(settings.retry_delays_s[min(attempt - 1, len(settings.retry_delays_s) - 1)])
                except TimeoutError:
                    raise _Failed(TimeoutError(f"no answer within {settings.timeout_s:g} s"), attempt) from None
                except Exception as exc:  # noqa: BLE001 - not retried: a bad request, auth, unknown model
                    raise _Failed(exc, attempt) from None
        usage = getattr(response, "usage", None)
        text = response.choices[0].message.content or ""
        return _Answer(
            text,
            int(getattr(usage, "prompt_tokens", 0) or 0),
            int(getattr(usage, "completion_tokens", 0) or 0),
            _cost(litellm, response),
            time.monotonic() - started,
            attempt,
        )

    def _key(self, trajectories: list[Trajectory]) -> str:
        s = self.settings
        parts = [PROMPT_VERSION, s.rubric.digest, s.model, s.mode, s.structured, [t.digest for t in trajectories]]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def _cached(self, key: str) -> dict | None:
        return self.cache.get(key) if self.cache else None

    def _store(self, key: str, scored: list[tuple[float, str]], answer: _Answer) -> None:
        if self.cache:
            self.cache.put(key, {**asdict(answer), "scores": [list(s) for s in scored]})

    def _abstain(self, exc: Exception, answer: _Answer | None = None, shared_by: int = 1) -> Judgement:
        attempts = exc.attempts if isinstance(exc, _Failed) else (answer.attempts if answer else 0)
        cause = exc.cause if isinstance(exc, _Failed) else exc
        reason = f"judge abstained: {type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
        usage = asdict(answer) if answer else {}
        return Judgement(
            None,
            reason,
            self.settings.model,
            usage.get("prompt_tokens", 0),
            usage.get("completion_tokens", 0),
            usage.get("cost_usd"),
            usage.get("latency_s", 0.0),
            attempts,
            shared_by=shared_by,
            abstained=True,
        )


class _Failed(Exception):
    def __init__(self, cause: Exception, attempts: int):
        super().__init__(str(cause))
        self.cause, self.attempts = cause, attempts


def _judgement(model: str, scored, usage: dict, cached: bool = False, shared_by: int = 1) -> Judgement:
    score, reasons = scored
    return Judgement(
        float(score),
        str(reasons),
        model,
        int(usage.get("prompt_tokens", 0)),
        int(usage.get("completion_tokens", 0)),
        usage.get("cost_usd"),
        float(usage.get("latency_s", 0.0)),
        0 if cached else int(usage.get("attempts", 1)),
        cached=cached,
        shared_by=shared_by,
    )


def _cost(litellm, response) -> float | None:
    hidden = getattr(response, "_hidden_params", None) or {}
    if isinstance(hidden.get("response_cost"), (int, float)):
        return float(hidden["response_cost"])
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # noqa: BLE001 - a model litellm has no price for (a local vLLM)
        return None


def litellm_module():
    """litellm, imported on first use (~4 s), with its price map read from the package, not fetched."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


class JudgeCache:
    """Verdicts on disk, one JSON file per key (written whole, then renamed into place)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: dict) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(value))
        partial.replace(path)
