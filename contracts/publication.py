"""The wire of publishing a policy version, as the learner sends it and the gateway validates it.

``POST /admin/adapters`` (``PublishAdapter`` with the adapter's digest and ``ProbeBody``; answered by
``AdapterPublished`` with each engine's ``ProbeAnswer``) and ``GET /admin/policy`` (``PolicyView``: the
version a policy serves, what the learner reads before and after publishing). The probe and the digest
they carry are ``contracts.adapter_proof``'s. ``PolicyName`` is every request's policy field.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

from contracts.adapter_proof import MAX_PROBE_CHECKS, MAX_PROBE_TOKENS, AdapterProbe
from store.policies import DEFAULT_POLICY, MAX_POLICY_NAME, InvalidPolicyName, check_policy_name

# JSON numbers only, as in every request body (gateway.api.protocol): no "1" or true coerced
TokenId = Annotated[StrictInt, Field(ge=0, lt=2**31)]
LogProb = Annotated[StrictFloat, Field(le=0.0, allow_inf_nan=False)]


class ProbeBody(BaseModel):
    """The learner's log-probs of the adapter's likeliest next tokens after prefixes of a probe sequence
    (contracts.adapter_proof)."""

    model_config = ConfigDict(extra="forbid")

    token_ids: list[TokenId] = Field(min_length=1, max_length=MAX_PROBE_TOKENS)
    prefixes: list[StrictInt] = Field(min_length=1, max_length=MAX_PROBE_CHECKS)  # prefix lengths, 1..len(token_ids)
    targets: list[TokenId]  # one per prefix: the token whose log-prob is compared
    logprobs: list[LogProb]  # one per prefix, under the adapter
    base_logprobs: list[LogProb]  # one per prefix, with the adapter disabled
    dtype: Literal["float32", "bfloat16", "float16"]  # the learner's compute dtype

    @model_validator(mode="after")
    def _one_per_prefix(self) -> ProbeBody:
        k = len(self.prefixes)
        if not len(self.targets) == len(self.logprobs) == len(self.base_logprobs) == k:
            raise ValueError(f"targets, logprobs and base_logprobs need one value per prefix ({k})")
        if not all(1 <= length <= len(self.token_ids) for length in self.prefixes):
            raise ValueError(f"a prefix length is outside 1..{len(self.token_ids)}")
        return self

    def probe(self) -> AdapterProbe:
        return AdapterProbe(
            tuple(self.token_ids), tuple(self.prefixes), tuple(self.targets), tuple(self.logprobs),
            tuple(self.base_logprobs), self.dtype,
        )  # fmt: skip


def _policy_name(name: str) -> str:
    try:
        return check_policy_name(name)
    except InvalidPolicyName as exc:
        raise ValueError(str(exc)) from None


# A policy's name (store.policies): a safe identifier, never a pin's keyword or an adapter's name
PolicyName = Annotated[str, Field(max_length=MAX_POLICY_NAME), AfterValidator(_policy_name)]


class PublishAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PolicyName = DEFAULT_POLICY  # the policy it is a version of (store.policies; a new name starts one)
    version: StrictInt = Field(ge=1)  # N of <policy>-v{N}; must exceed the policy's current version
    path: str = Field(min_length=1)  # a PEFT adapter folder the engine can read
    # sha256 of the folder's adapter_config.json and adapter_model.safetensors (contracts.adapter_proof)
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    probe: ProbeBody | None = None  # without one the engines' use of the adapter is not checked


class ProbeAnswer(BaseModel):
    engine: str
    mean_abs: float  # mean |engine - learner| log-prob per probe token under the adapter, nats
    base_mean_abs: float  # the same against the learner's base model
    effect: float  # mean |adapter - base|: how far the adapter moves the probe
    tolerance: float  # max(the dtypes' floor, twice the noise)
    noise: float = 0.0  # mean |engine - learner| under the base model on the same tokens: its numerics
    passed: bool
    distinguishable: bool  # effect - noise > tolerance: the probe tells the adapter from the base model


class AdapterPublished(BaseModel):
    policy: str = DEFAULT_POLICY
    version: int
    name: str
    load_s: float
    unloaded: list[int]  # versions retired by this publication
    loaded: dict[int, str]  # every version of the policy now served: version -> engine name (0 = base model)
    digest: str | None = None  # the adapter's digest as recorded (null: neither sent nor readable)
    proof: list[ProbeAnswer] = []  # each engine's answer to the probe; empty: none was sent


class PolicyView(BaseModel):
    public_name: str
    policy: str = DEFAULT_POLICY  # store.policies
    current_version: int
    loaded: dict[int, str]
    digests: dict[int, str] = {}  # loaded version -> its adapter's digest, where one was published
    max_model_len: int | None = None  # the engine's context length (the learner's default token budget)
    max_staleness: int | None = None  # versions kept loaded behind the current one (the learner drops older samples)
