"""What the gateway keeps across calls, handed to each call's pipeline (``gateway.recording.pipeline``) as
one record: per rollout, its calls' graph, its token arrays and engine messages' JSON, its engine time,
its refused calls and its calls in flight (SDK retries); and the gateway's metrics and whether it can
render the model's chats (token roles).

The gateway builds it once (``gateway.state``) and every call's pipeline reads the same objects, so what
one call writes in them the next call of its rollout finds."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.engine.body import EngineBodies
from gateway.engine.clock import EngineClock
from gateway.engine.token_prefix import PrefixArrays
from gateway.metrics import GatewayMetrics
from gateway.recording.callgraph import CallGraphIndex
from gateway.recording.prompt_roles import PromptRoles
from gateway.request.refusals import EngineRefusals
from gateway.request.retries import RetryBook


@dataclass(frozen=True)
class CallBooks:
    graph: CallGraphIndex  # rollouts' recorded calls, linked parent to child
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    engine_clock: EngineClock = field(default_factory=EngineClock)  # per rollout, for engine-paced budgets
    refusals: EngineRefusals = field(default_factory=EngineRefusals)  # per rollout: refused main-loop calls
    retries: RetryBook = field(default_factory=RetryBook)  # in-flight and recent calls: SDK retries
    prefixes: PrefixArrays = field(default_factory=PrefixArrays)  # rollouts' recent token arrays
    engine_bodies: EngineBodies = field(default_factory=EngineBodies)  # rollouts' last engine messages' JSON
    roles: PromptRoles = field(default_factory=PromptRoles)  # calls' prompt token roles (tito's renderer)
