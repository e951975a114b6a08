"""Prefix trees of token sequences: the samples of a group (and the paths of one rollout) share their
first tokens, which tree packing forwards once.

A tree is a list of nodes in depth-first order. Node n covers tokens ``[start, end)`` of every sample
that passes through it (its ``members``; their tokens there are equal) and hangs under ``parent``
(-1 for a root). A sample's path is the chain of nodes from a root to the node where it ends; its
tokens are the concatenation of the path's node ranges, so ``start`` is also the node's first position.

Sizes: the tree holds ``unique_tokens`` tokens; forwarding the samples one by one costs
``sum(lengths)``; the difference is what tree packing saves. For sequences in depth-first order,
unique tokens = sum(lengths) - sum of the common prefix of each sequence with the one before it, which
``split_by_budget`` uses to cut a tree too big for one row without building it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TreeNode:
    start: int  # first token (= position) of the node within each member sample
    end: int
    parent: int  # index of the parent node in the tree's list, -1 for a root
    members: tuple[int, ...]  # samples (indices into the sequences given) passing through this node

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PrefixTree:
    nodes: tuple[TreeNode, ...]  # depth-first: a parent before its children
    order: tuple[int, ...]  # the member samples in depth-first order

    @property
    def unique_tokens(self) -> int:
        return sum(node.length for node in self.nodes)

    def path(self, sample: int) -> list[int]:
        """Node indices from the root to the node where ``sample`` ends."""
        deepest = max(n for n, node in enumerate(self.nodes) if sample in node.members)
        chain = [deepest]
        while self.nodes[chain[-1]].parent >= 0:
            chain.append(self.nodes[chain[-1]].parent)
        return chain[::-1]

    def ancestors(self, node: int) -> list[int]:
        chain = []
        parent = self.nodes[node].parent
        while parent >= 0:
            chain.append(parent)
            parent = self.nodes[parent].parent
        return chain[::-1]


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two 1-D token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def build_tree(seqs: Sequence[np.ndarray], members: Sequence[int]) -> PrefixTree:
    """The compressed prefix tree (trie) of the given samples (non-empty sequences)."""
    nodes: list[TreeNode] = []
    order: list[int] = []
    _grow(seqs, list(members), 0, -1, nodes, order)
    return PrefixTree(tuple(nodes), tuple(order))


def _grow(
    seqs: Sequence[np.ndarray], members: list[int], depth: int, parent: int, nodes: list[TreeNode], order: list[int]
) -> None:
    """Children of ``parent``: members (all equal up to depth) grouped by their token at ``depth``."""
    order.extend(m for m in members if len(seqs[m]) == depth)  # samples ending at the parent
    by_token: dict[int, list[int]] = {}
    for m in members:
        if len(seqs[m]) > depth:
            by_token.setdefault(int(seqs[m][depth]), []).append(m)
    for group in by_token.values():
        if len(group) == 1:
            nodes.append(TreeNode(depth, len(seqs[group[0]]), parent, tuple(group)))
            order.append(group[0])
            continue
        first = seqs[group[0]]
        shared = min(common_prefix(first[depth:], seqs[m][depth:]) for m in group[1:])
        nodes.append(TreeNode(depth, depth + shared, parent, tuple(group)))
        _grow(seqs, group, depth + shared, len(nodes) - 1, nodes, order)


def split_by_budget(seqs: Sequence[np.ndarray], tree: PrefixTree, budget: int) -> list[list[int]]:
    """The tree's samples cut, in depth-first order, into runs whose own trees hold <= budget tokens.

    Each sample must itself fit (len <= budget). Neighbours in depth-first order share the most, so
    consecutive runs keep most of the saving; a run repeats the prefix it shares with the run before.
    """
    runs: list[list[int]] = []
    size = 0
    for k, m in enumerate(tree.order):
        grow = len(seqs[m]) - (common_prefix(seqs[tree.order[k - 1]], seqs[m]) if runs and runs[-1] else 0)
        if runs and size + grow <= budget:
            runs[-1].append(m)
            size += grow
        else:
            runs.append([m])
            size = len(seqs[m])
    return runs
