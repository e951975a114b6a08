"""What a run plays (``RunPlan``) and what each slot yields (``Played``, then ``RolloutResult``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from harnesses.environments import Environments
from harnesses.grading.judge import Judge
from harnesses.grading.reward_functions import RewardFunction
from harnesses.grading.verify import Verdict
from harnesses.harness import AgentOutcome, Harness
from harnesses.task import Task
from rollouts.budget import DEFAULT_WALL_FACTOR
from rollouts.slot_leases import DEFAULT_LEASE_S
from sandboxes import SandboxSpec
from sandboxes.kinds import Kind
from store.capture_modes import CaptureMode


class Admission(StrEnum):
    """A pace's answer before a runner claims slots: may it begin another group (a task's slots of the round)?
    The groups it has begun are finished either way, so none is left part-played."""

    GO = "go"
    HOLD = "hold"  # not now: ask again once the groups begun are played
    STOP = "stop"  # no more this round: end it once the groups begun are played


@dataclass(frozen=True)
class RunPlan:
    run: str
    tasks: list[Task]
    harness: Harness
    group_size: int  # G
    concurrency: int  # rollouts at once
    sandbox: Kind  # local, docker, harbor:<type> (sandboxes.kinds), as the config read it
    base_spec: SandboxSpec = field(default_factory=SandboxSpec)  # limits and options every sandbox shares
    rewards: tuple[RewardFunction, ...] = ()
    capture: CaptureMode | None = None  # the run's capture mode when the runner creates it
    sampling: dict | None = None  # the run's {"temperature", "top_p"} when the runner creates it
    policy: str | None = None  # the policy the run trains and is served (store.policies); None: the server's default
    sandbox_options: dict = field(default_factory=dict)  # e.g. {"isolation": "bwrap"} for local, Harbor's options
    round: int = 0  # training rounds sample every task again, each round into new groups
    wall_factor: float = DEFAULT_WALL_FACTOR  # wall-clock ceiling per rollout, x the task's agent budget
    environments: Environments | None = None  # Harbor task images (built and cached); None: a new one
    judge: Judge | None = None  # an LLM judge adding the reward component "judge"
    teacher: str | None = (
        None  # the external model serving this run (harnessrl.teachers.teacher), kept in each rollout's meta
    )
    worker: str = ""  # this runner's id in the run's leases; "" = default_worker_id()
    lease_s: float = DEFAULT_LEASE_S  # a slot's lease, renewed every third of it
    sandbox_gateway: str | None = None  # the gateway URL sandboxes' bridges connect to; None: as it names itself
    # Asked before each claim (None: always GO): the quickstart holds new groups back while the learner has
    # enough waiting, and stops the round at its time budget.
    pace: Callable[[], Awaitable[Admission]] | None = None

    @property
    def group(self) -> str:
        return f"r{self.round}"


@dataclass(frozen=True)
class RolloutResult:
    task: str
    index: int
    rollout_id: int
    status: str  # finished | failed
    reward: float | None
    error: str | None = None


@dataclass(frozen=True)
class Played:
    """A rollout whose agent and verifier ran, not yet ended (a group judge waits for its group)."""

    task: Task
    index: int
    rollout: dict
    status: str
    error: str | None
    rewards: dict
    verdict: Verdict | None = None
    outcome: AgentOutcome | None = None
