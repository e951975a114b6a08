"""Training samples from a rollout's call graph: one per root-to-leaf path of non-side calls.

Calls tagged ``undelivered`` (the client went away before their response reached it: the agent
never saw them) are never part of a sample, side calls included or not.

Shared by the REST API (``/api/rollouts/{id}/samples``) and the learner, so both see the same
tokens. Along a path every call's prompt + output prefixes the next call's prompt, so the leaf's
prompt + output holds the whole conversation and each call's output sits at a known offset.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from store.records import CallTag, TokenRole

UNDELIVERED = CallTag.UNDELIVERED  # the tag of a call whose response never reached its client


@dataclass(frozen=True)
class CallNode:
    call_id: int
    parent_id: int | None
    prompt_ids: np.ndarray  # int32 [prompt_len]
    output_ids: np.ndarray  # int32 [output_len]
    output_logprobs: np.ndarray  # float32 [output_len], the sampler's logprobs (NaN: a teacher's call)
    policy_version: int
    tags: tuple[str, ...]  # side-call tags; empty for the agent's main loop
    # uint8 [prompt_len]: each prompt token's TokenRole (store.roles); None: not known
    prompt_roles: np.ndarray | None = None


@dataclass(frozen=True)
class Sample:
    call_ids: tuple[int, ...]  # root -> leaf
    input_ids: np.ndarray  # int32 [T]: the leaf's prompt + output
    loss_mask: np.ndarray  # int8 [T]: 1 on tokens sampled by a call of the path
    old_logprobs: np.ndarray  # float32 [T]: sampler logprobs where loss_mask is 1, else 0
    policy_versions: np.ndarray  # int32 [T]: version that sampled the token, -1 where loss_mask is 0
    # (start, end) of each path call's output in input_ids, aligned with call_ids; () when built by hand
    output_spans: tuple[tuple[int, int], ...] = ()
    # int8 [T]: each token's store.records.TokenRole (output tokens ASSISTANT); None: not known (built by
    # hand, or read from calls stored without roles)
    roles: np.ndarray | None = None

    @property
    def num_turns(self) -> int:
        return len(self.call_ids)


@dataclass(frozen=True)
class SampledMarks:
    """Who sampled each token of a sequence: what a sample's loss mask, old logprobs and versions hold."""

    mask: np.ndarray  # int8 [T]: 1 on tokens a call sampled
    logprobs: np.ndarray  # float32 [T]: the sampler's logprob where mask is 1, else 0
    versions: np.ndarray  # int32 [T]: the sampling call's policy version where mask is 1, else -1

    @classmethod
    def empty(cls, length: int) -> SampledMarks:
        return cls(
            np.zeros(length, dtype=np.int8), np.zeros(length, dtype=np.float32), np.full(length, -1, dtype=np.int32)
        )

    def mark(
        self,
        ids: np.ndarray,
        offset: int,
        output_ids: np.ndarray,
        output_logprobs: np.ndarray,
        version: int,
        where: str,
    ) -> None:
        """Marks a call's output, which sits in ``ids`` at ``offset``; ``where`` names it if it does not."""
        end = offset + len(output_ids)
        if end > len(ids) or not np.array_equal(ids[offset:end], output_ids):
            raise ValueError(f"{where}: the graph is inconsistent")
        self.mask[offset:end] = 1
        self.logprobs[offset:end] = output_logprobs[: end - offset]
        self.versions[offset:end] = version


def trained_on(tags: tuple[str, ...], include_side: bool) -> bool:
    """Whether a call with these tags belongs in samples: untagged, or a side call when they are included."""
    return not tags or (include_side and UNDELIVERED not in tags)


def root_to_leaf_paths(nodes: list[CallNode], include_side: bool = False) -> list[list[CallNode]]:
    """Paths through the graph of kept calls; a call whose parent is not kept starts a path."""
    kept = {n.call_id: n for n in nodes if trained_on(n.tags, include_side)}
    children: dict[int | None, list[CallNode]] = defaultdict(list)
    for node in kept.values():
        parent = node.parent_id if node.parent_id in kept else None
        children[parent].append(node)
    paths: list[list[CallNode]] = []
    stack = [[root] for root in sorted(children[None], key=lambda n: n.call_id)]
    while stack:
        path = stack.pop(0)
        below = sorted(children.get(path[-1].call_id, []), key=lambda n: n.call_id)
        if not below:
            paths.append(path)
        stack[:0] = [path + [child] for child in below]
    return paths


def sample_from_path(path: list[CallNode]) -> Sample:
    """Input ids, loss mask, old logprobs, versions and token roles for one root-to-leaf path.

    Shapes: every array is [T] with T = len(leaf.prompt_ids) + len(leaf.output_ids).
    """
    leaf = path[-1]
    input_ids = np.concatenate([leaf.prompt_ids, leaf.output_ids]).astype(np.int32)
    marks = SampledMarks.empty(len(input_ids))
    for node in path:
        marks.mark(
            input_ids,
            len(node.prompt_ids),
            node.output_ids,
            node.output_logprobs,
            node.policy_version,
            f"call {node.call_id} is not a prefix of call {leaf.call_id}",
        )
    spans = tuple((len(n.prompt_ids), len(n.prompt_ids) + len(n.output_ids)) for n in path)
    roles = sample_roles(leaf, marks.mask)
    return Sample(tuple(n.call_id for n in path), input_ids, marks.mask, marks.logprobs, marks.versions, spans, roles)


def sample_roles(leaf: CallNode, sampled: np.ndarray) -> np.ndarray | None:
    """int8 [T]: the leaf's prompt roles then ASSISTANT over its output, and ASSISTANT on every token a
    call of the path sampled (``sampled``: the loss mask); None when the leaf's roles are not known."""
    if leaf.prompt_roles is None or len(leaf.prompt_roles) != len(leaf.prompt_ids):
        return None
    roles = np.full(len(sampled), TokenRole.ASSISTANT, dtype=np.int8)
    roles[: len(leaf.prompt_roles)] = leaf.prompt_roles
    roles[sampled.astype(bool)] = TokenRole.ASSISTANT
    return roles


def build_samples(nodes: list[CallNode], include_side: bool = False) -> list[Sample]:
    return [sample_from_path(path) for path in root_to_leaf_paths(nodes, include_side)]


@dataclass(frozen=True)
class Ancestor:
    """A call above another on its path: its output sits in the descendant's prompt at ``offset``."""

    call_id: int
    offset: int  # the ancestor's prompt length
    output_ids: np.ndarray  # int32 [output_len]
    tags: tuple[str, ...]
    output_logprobs: np.ndarray  # float32 [output_len], the sampler's logprobs
    policy_version: int


def prompt_marks(prompt_ids: np.ndarray, ancestors: list[Ancestor], include_side: bool = False) -> SampledMarks:
    """Who sampled each prompt token: the sample's loss mask, old logprobs and versions on the prompt.

    ``ancestors`` runs parent first. As in ``root_to_leaf_paths``, a side-call ancestor ends the
    path unless side calls are included, so the marks equal those of the sample through this call.
    """
    marks = SampledMarks.empty(len(prompt_ids))
    for ancestor in ancestors:
        if not trained_on(ancestor.tags, include_side):
            break
        marks.mark(
            prompt_ids,
            ancestor.offset,
            ancestor.output_ids,
            ancestor.output_logprobs,
            ancestor.policy_version,
            f"call {ancestor.call_id} is not a prefix of its descendant",
        )
    return marks


def prompt_mask(prompt_ids: np.ndarray, ancestors: list[Ancestor], include_side: bool = False) -> np.ndarray:
    """int8 [prompt_len]: 1 on prompt tokens an ancestor sampled (what a sample trains on), else 0."""
    return prompt_marks(prompt_ids, ancestors, include_side).mask
