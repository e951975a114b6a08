"""Wire models of the REST API."""

from __future__ import annotations

import dataclasses
import json
import typing
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, create_model

from contracts.publication import PolicyName
from store.capture_modes import CaptureMode
from store.records import AGENT_LOG_CHARS, StoredCall
from store.rewards import VERIFIER
from store.roles import ROLE_NAMES

T = TypeVar("T")


def as_utc(value: datetime) -> datetime:
    """The instant in UTC; a naive value (SQLite keeps no zone) is one the store wrote in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Every timestamp on the wire: ISO 8601 in UTC with its offset ("...+00:00" / "Z"), on SQLite and PostgreSQL.
Timestamp = Annotated[datetime, AfterValidator(as_utc)]

NAME = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f/]+$")
# Numbers a client sends are JSON numbers (StrictInt, StrictFloat): "1" and true are refused, not coerced; a
# float takes an integer (JSON has one number type). A reward component is finite, or null for "no opinion".
Finite = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Reward = Finite | None
REQUEST_ID = r"^[\x21-\x7e]+$"  # printable ASCII, no spaces


class Sampling(BaseModel):
    """A training run's sampling settings, fixed when the run is created and applied to all its calls.

    A setting left out is the run's (for a new run: temperature 1, top_p 1). Temperature 0 is greedy
    decoding, for evaluation runs: the learner refuses to train on them.
    """

    model_config = ConfigDict(extra="forbid")

    temperature: StrictFloat | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)


class CreateRollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: str = NAME
    task: str = Field(min_length=1, max_length=400, pattern=r"^[^\x00-\x1f]+$")
    group: str | None = Field(default=None, min_length=1, max_length=200)
    meta: dict[str, Any] = Field(default_factory=dict)  # e.g. {"harness": "opencode"}
    # How the run's calls are captured (store.capture_modes); set when the run is created.
    capture: CaptureMode | None = None
    # G, the group's size: the group becomes ready for the learner when all G rollouts ended.
    group_size: StrictInt | None = Field(default=None, ge=1, le=4096)
    # The run's sampling, set when the run is created (default temperature 1, top_p 1); a run keeps it.
    sampling: Sampling | None = None
    # The client's id for this request (or the Idempotency-Key header): a retry with the same id
    # returns the same rollout and token instead of creating a second one.
    request_id: str | None = Field(default=None, min_length=1, max_length=200, pattern=REQUEST_ID)
    # Pin the rollout to a policy version (evaluation; store.policies.parse_pin): every call is served by
    # it, whatever model the agent names. base | latest (of the run's policy) | pi@latest | pi@v3 | pi-v3:
    # "latest" is the version current when the rollout is created; a published version that is not
    # loaded is loaded. Absent: the run's policy's current version when the rollout starts (training).
    policy: str | None = Field(default=None, max_length=60)
    # The policy the run trains and is served (store.policies), set when the run is created (default:
    # the server's default policy, "policy"); a run keeps it. A new name starts that policy.
    run_policy: PolicyName | None = None


class AddReward(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="api", min_length=1, max_length=200)
    value: Reward  # None: this source has no opinion (left out of the total)


def _bounded_details(details: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for name, detail in details.items():
        try:
            size = len(json.dumps(detail, allow_nan=False))
        except ValueError:
            raise ValueError(f"reward detail {name!r} is plain JSON: no NaN or infinity") from None
        limit = DETAIL_BYTES.get(name, MAX_REWARD_DETAIL_BYTES)
        if size > limit:
            raise ValueError(f"reward detail {name!r} is at most {limit} bytes of JSON, not {size}")
    return details


MAX_REWARD_DETAIL_BYTES = 16_384
# The verifier's detail carries its whole output (head and tail when long: harnesses/grading/verify.py).
VERIFIER_DETAIL_BYTES = 65_536
DETAIL_BYTES = {VERIFIER: VERIFIER_DETAIL_BYTES}
RewardDetails = Annotated[dict[str, dict[str, Any]], AfterValidator(_bounded_details)]


class EndRollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # cancelled: ended without a result (e.g. interrupted); its place in the group goes to a replacement
    status: Literal["finished", "failed", "cancelled"]
    error: str | None = None  # why it failed: timeout, crash, ...
    rewards: dict[str, Reward] = Field(default_factory=dict)  # final components, added first
    # How components were reached (e.g. "judge": model, tokens, cost, reasons), shown by the viewer.
    reward_details: RewardDetails = Field(default_factory=dict, max_length=20)
    # What the runner saw of the agent: its exit status and the tail of its own output.
    agent_exit_code: StrictInt | None = Field(default=None, ge=-(2**31), lt=2**31)
    agent_log: str | None = Field(default=None, max_length=AGENT_LOG_CHARS)


class GroupRollout(BaseModel):
    id: int
    status: str
    reward: float | None


class GroupView(BaseModel):
    id: int
    run: str
    task: str
    name: str
    status: str  # open | ready | consumed | quarantined
    error: str | None = None  # why the learner quarantined it
    size: int | None
    ready_at: Timestamp | None
    created_at: Timestamp
    rollouts: list[GroupRollout]  # by id: the group's rewards side by side


class RolloutCreated(BaseModel):
    id: int
    token: str
    base_url: str  # ends in /r/<token>/v1: the agent's OpenAI base URL


class RolloutSummary(BaseModel):
    """A rollout in a listing (no call counts: listings stay one query)."""

    id: int
    run: str
    task: str
    group: str
    group_id: int
    status: str
    reward: float | None
    error: str | None
    meta: dict[str, Any]
    created_at: Timestamp
    finished_at: Timestamp | None
    pinned_version: int | None = None  # the policy version it was pinned to (0 = base); null: not pinned
    policy: str = "policy"  # the policy serving its calls (its run's, or its pin's)


class GraphStats(BaseModel):
    calls: int
    roots: int  # calls extending no earlier call: first turns, subagents, side calls, rewrites
    forks: int  # roots that diverged inside an earlier call's sampled tokens
    drift_tokens: int  # sampled tokens lost at those divergences


class RolloutView(RolloutSummary):
    """One rollout in full: its reward components, calls and call graph."""

    rewards: dict[str, float | None]
    reward_details: dict[str, dict[str, Any]] = {}  # how components were reached (the judge's tokens, cost)
    num_calls: int
    graph: GraphStats
    # Seconds its model calls spent in the engine (in-flight ones included, parallel ones once), as
    # this gateway measured them: the runner charges an agent its wall time minus this.
    engine_s: float = 0.0
    agent_exit_code: int | None = None  # the agent's exit status, as the runner reported it
    agent_log: str | None = None  # the tail of the agent's own output
    # Main-loop calls this gateway answered and refused (the engine's 400s: a prompt over its context),
    # with the last refusal's cause; while the rollout runs (gateway.request.refusals).
    answered_calls: int = 0
    refused_calls: int = 0
    last_refusal: str | None = None


def record_view(name: str, record: type, left_out: tuple[str, ...], **wire_types: Any) -> type[BaseModel]:
    """The wire model of an internal record (a dataclass): its fields in its order with its defaults, but
    ``left_out``; ``wire_types`` give a field the wire's own type."""
    hints = typing.get_type_hints(record)
    fields = {
        f.name: (wire_types.get(f.name, hints[f.name]), ... if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(record)
        if f.name not in left_out
    }
    return create_model(name, **fields)


# Token roles (store.roles) as runs [role, start, end): one per stretch of tokens of one role; null: unknown.
ROLES_DOC = (
    "Token roles as runs [role, start, end] (end exclusive) covering the tokens in order; role: system (system "
    "prompt, tools), user, tool (a tool result: the environment), assistant (the model's own turns, every sampled "
    "token), template (the chat template's glue), unknown. null: not recorded (an older store, an unknown capture)."
)
RoleRuns = Annotated[list[tuple[Literal[ROLE_NAMES], int, int]] | None, Field(description=ROLES_DOC)]  # type: ignore

# A recorded call: store.records.StoredCall, its fields documented there, but its request and response
# (GET /api/calls/{id} adds them: CallDetail). Listings asked with tokens=false leave the arrays empty.
CallView = record_view("CallView", StoredCall, ("request", "response"), created_at=Timestamp, prompt_roles=RoleRuns)


class CallMismatchView(BaseModel):
    """The learner's log-probs of the call's sampled tokens against the sampler's, when it trained them."""

    step: int  # the learner step that trained the call
    version: int  # the policy version the learner's weights were
    tokens: int  # tokens compared: those that version sampled
    mean_abs: float | None  # mean |learner - sampler| log-prob per compared token, nats
    max_abs: float | None
    k3: float | None  # mean exp(Δ) - 1 - Δ: an estimate of KL(sampler || learner)
    frac_over: float | None  # share of compared tokens with |Δ| > 0.1 nats
    deltas: list[float | None]  # one per output token: learner - sampler log-prob; null: not compared


class CallDetail(CallView):
    request: dict[str, Any]
    response: dict[str, Any]
    mismatch: CallMismatchView | None = None  # null until the learner trained the call
    # decode=true: the text (null without a tokenizer), one piece per id, and the prompt's mask
    prompt_text: str | None = None
    output_text: str | None = None
    prompt_pieces: list[str] | None = None
    output_pieces: list[str] | None = None
    prompt_mask: list[int] | None = None  # 1 where an ancestor call sampled the prompt token (trained on)
    # decode=true, one per prompt id: the ancestor's sampler logprob and policy version where prompt_mask
    # is 1 (as the sample's old_logprobs and policy_versions), null and -1 where it is 0
    prompt_logprobs: list[float | None] | None = None
    prompt_versions: list[int] | None = None


class SampleView(BaseModel):
    """One training sample: a root-to-leaf path of the call graph as a single token sequence."""

    call_ids: list[int]  # root -> leaf
    num_turns: int
    input_ids: list[int]
    loss_mask: list[int]  # 1 on tokens the model sampled; prompt and tool output are 0
    # the sampler's logprobs, 0 where loss_mask is 0, null on tokens a teacher wrote (no sampler's)
    old_logprobs: list[float | None]
    policy_versions: list[int]  # version that sampled each token, -1 where loss_mask is 0
    roles: RoleRuns = None  # over input_ids: the leaf's prompt roles, assistant on every sampled token
    pieces: list[str] | None = None  # decode=true with a tokenizer: one decoded string per input id


class SampleList(BaseModel):
    rollout_id: int
    reward: float | None
    data: list[SampleView]


class RunView(BaseModel):
    id: int
    name: str
    config: dict[str, Any]
    created_at: Timestamp
    # The run's rollouts in numbers (one GROUP BY per page of runs)
    rollouts: int
    rollouts_finished: int
    reward_mean: float | None  # over the rollouts with a reward
    last_activity: Timestamp | None  # the latest rollout's created_at; null before the first rollout


class RewardByVersion(BaseModel):
    policy_version: int  # a rollout's version: the lowest policy version among its calls
    rollouts: int
    reward_mean: float | None


class PolicyResultView(BaseModel):
    """One policy's evaluation numbers over a run's rollouts pinned to it (store.evaluation)."""

    policy: str  # base | <policy>-v<N>
    version: int  # 0 = base
    tasks: int
    rollouts: int  # ended (finished or failed)
    passed: int  # finished with the verifier's reward >= 1
    failures: int  # ended as failed (timeouts, crashes): reward 0, no pass
    k: int  # the k of pass_at_k: the fewest rollouts any of its tasks has
    pass_at_1: float | None  # mean over tasks of passed / rollouts
    pass_at_k: float | None  # unbiased estimator, mean over tasks
    reward_mean: float | None  # per rollout, failures as 0
    reward_low: float | None  # 95% interval of the mean (normal approximation)
    reward_high: float | None
    # the mean of each verifier metric (reward.json's other numbers) over its finished rollouts that have it
    metrics: dict[str, float] = {}


class TaskPolicyCell(BaseModel):
    rollouts: int
    passed: int


class PolicyTaskView(BaseModel):
    task: str
    policies: dict[str, TaskPolicyCell]  # policy label -> its rollouts and passes on this task


class MismatchSummaryView(BaseModel):
    """A run's trained calls of one (harness, model, version): train/inference mismatch, tokens pooled."""

    harness: str | None
    model: str
    version: int  # the policy version that sampled the compared tokens
    calls: int
    tokens: int
    mean_abs: float | None  # mean |learner - sampler| log-prob per compared token, nats
    max_abs: float | None
    k3: float | None
    frac_over: float | None  # share of compared tokens over 0.1 nats


class CaptureHealthView(BaseModel):
    """How faithfully a run's calls were recorded, for one (harness, model) (store.health)."""

    harness: str | None
    model: str
    rollouts: int
    calls: int
    side_calls: int
    retried: int
    later_turns: int  # main-loop calls after each rollout's first
    extending_turns: int  # of those, extending an earlier call exactly
    extension_rate: float | None  # extending_turns / later_turns
    forks: int  # roots that diverged inside an earlier call's sampled tokens
    drift_tokens: int  # sampled tokens lost at those forks
    false_forks: int  # roots sharing a long prefix with an earlier call but rewriting its prompt


class RunSummary(BaseModel):
    """A run in numbers, all SQL aggregates."""

    run: str
    rollouts: int
    rollouts_by_status: dict[str, int]
    groups_by_status: dict[str, int]
    reward_mean: float | None
    reward_by_version: list[RewardByVersion]
    calls: int
    side_calls: int  # calls with tags (titles, summaries): left out of training
    roots: int
    forks: int
    fork_rate: float | None  # forks / calls
    # Main-loop calls after each rollout's first, and those extending an earlier call's prompt + output
    # ids exactly (a parent in the call graph): the capture's zero-drift share is their ratio.
    later_turns: int = 0
    extending_turns: int = 0
    extension_rate: float | None = None  # extending_turns / later_turns
    drift_tokens: int
    prompt_tokens: int
    output_tokens: int
    learner_steps: int
    # Evaluation: per policy, over the run's rollouts pinned to one (POST /api/rollouts "policy");
    # empty for runs without pinned rollouts
    policies: list[PolicyResultView] = Field(default_factory=list)
    policy_tasks: list[PolicyTaskView] = Field(default_factory=list)  # each task's passes per policy


class LearnerStepView(BaseModel):
    step: int
    metrics: dict[str, Any]
    created_at: Timestamp


class ToolCallView(BaseModel):
    id: str
    name: str
    arguments: str


class ConversationMessage(BaseModel):
    """A chat message of any dialect, normalized; absent keys are left out of the JSON."""

    role: str
    content: str
    tool_calls: list[ToolCallView] | None = None
    tool_call_id: str | None = None
    call_id: int | None = None  # on assistant messages: the recorded call that produced it


class Conversation(BaseModel):
    rollout_id: int
    messages: list[ConversationMessage]


class Page(BaseModel, Generic[T]):
    """Keyset pagination: pass ``next_cursor`` as ``after`` to get the next page."""

    data: list[T]
    next_cursor: int | None
