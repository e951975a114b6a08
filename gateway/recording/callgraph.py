"""The call graph: which earlier call of a rollout each new call extends.

A call's parent is the earlier call of the same rollout whose prompt + output is a token prefix of
its prompt (the longest such). Retries share a parent and become siblings. A call that extends
nothing is a new root; when it diverges *inside* an earlier call's sampled tokens (the agent sent
back a re-serialized turn that tokenizes differently), it is a fork of that call and the sampled
tokens lost from the divergence on are its drift. A root that shares a long prefix with an earlier
call but diverges inside its *prompt* is a false fork: the harness rewrote history (``Link.kind``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import numpy as np

from store.arrays import ids_array, pack_ids
from store.records import FALSE_FORK_TOKENS, GraphNode

RECENT_CALLS = 64  # per rollout: candidates for parents (subagents interleave, but not 64 deep)
ROLLOUTS_CACHED = 2048  # rollouts whose recent calls are kept in memory


@dataclass(frozen=True)
class Link:
    parent_id: int | None
    parent_tokens: int = 0  # the parent's prompt + output: the prefix of this call's prompt
    fork_of: int | None = None  # the call whose sampled tokens this one diverged from
    drift_tokens: int = 0  # sampled tokens of fork_of from the divergence point on
    main_before: bool = True  # an earlier main-loop call of the rollout exists (only a root can say no)
    continues_earlier: bool = False  # a root whose first FALSE_FORK_TOKENS tokens are an earlier call's

    @property
    def kind(self) -> str:
        """extends | fork | first (the rollout's first main-loop call) | false_fork | new_root."""
        if self.parent_id is not None:
            return "extends"
        if self.fork_of is not None:
            return "fork"
        if not self.main_before:
            return "first"
        return "false_fork" if self.continues_earlier else "new_root"


def common_prefix_len(a: bytes, b: bytes) -> int:
    """Length in tokens of the common prefix of two packed int32 sequences."""
    n = min(len(a), len(b)) // 4
    if n == 0:
        return 0
    x, y = ids_array(a, n), ids_array(b, n)
    mismatch = np.flatnonzero(x != y)
    return int(mismatch[0]) if mismatch.size else n


def link(prompt: bytes, candidates: Iterable[GraphNode]) -> Link:
    """Find the parent (longest earlier sequence that prefixes ``prompt``), else the fork point."""
    # Longest first, among equals the latest (a retry's result is the freshest): the first that
    # prefixes the prompt is the parent, so a long chain costs one comparison, not one per ancestor.
    candidates = sorted(candidates, key=lambda node: (len(node.sequence), node.call_id), reverse=True)
    best = next((node for node in candidates if prompt.startswith(node.sequence)), None)
    if best is not None:
        return Link(parent_id=best.call_id, parent_tokens=len(best.sequence) // 4)
    fork, drift = None, 0
    best_overlap = 0
    for node in candidates:
        # A fork extends the node's whole prompt and goes on inside its output: cheap byte checks
        # rule most candidates out before the element-wise comparison (retries repeat a prompt).
        prompt_bytes = node.prompt_len * 4
        if len(prompt) <= prompt_bytes or not prompt.startswith(node.sequence[:prompt_bytes]):
            continue
        shared = common_prefix_len(prompt, node.sequence)
        # Divergence inside the node's sampled tokens is drift, from its first sampled token on (an
        # agent that re-serialized the whole answer); inside its prompt is a rewrite.
        if shared >= node.prompt_len and shared >= best_overlap:
            fork, best_overlap = node.call_id, shared
            drift = len(node.sequence) // 4 - shared
    if fork is not None:
        return Link(parent_id=None, fork_of=fork, drift_tokens=drift)
    main_before = any(not node.side for node in candidates)
    return Link(parent_id=None, main_before=main_before, continues_earlier=shares_lead(prompt, candidates))


def shares_lead(prompt: bytes, candidates: Iterable[GraphNode]) -> bool:
    """Whether the prompt's first FALSE_FORK_TOKENS tokens are some candidate's: one byte comparison
    each (the longest shared prefix of every recent call, element-wise, cost 0.17 ms a root call)."""
    lead = FALSE_FORK_TOKENS * 4
    return len(prompt) >= lead and any(prompt[:lead] == node.sequence[:lead] for node in candidates)


class CallGraphIndex:
    """The recent calls of each active rollout, in memory; loaded from the store on first use."""

    def __init__(self, load_recent: Callable[[int, int], Awaitable[list[GraphNode]]]):
        self._load_recent = load_recent
        self._rollouts: OrderedDict[int, deque[GraphNode]] = OrderedDict()

    async def link(self, rollout_id: int, prompt_ids: list[int]) -> Link:
        return link(pack_ids(prompt_ids), await self._recent(rollout_id))

    async def add(self, rollout_id: int, node: GraphNode) -> None:
        (await self._recent(rollout_id)).append(node)

    async def _recent(self, rollout_id: int) -> deque[GraphNode]:
        recent = self._rollouts.get(rollout_id)
        if recent is None:
            loaded = deque(await self._load_recent(rollout_id, RECENT_CALLS), maxlen=RECENT_CALLS)
            recent = self._rollouts.setdefault(rollout_id, loaded)  # a concurrent load may have won
            if len(self._rollouts) > ROLLOUTS_CACHED:
                self._rollouts.popitem(last=False)
        else:
            self._rollouts.move_to_end(rollout_id)
        return recent
