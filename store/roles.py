"""Token roles as the store keeps and shows them (``store.records.TokenRole``, one byte per prompt token).

A call stores the roles of the prompt tokens it stores (``prompt_delta``: the prompt past
``prompt_offset``), in ``calls.prompt_roles`` (uint8, NULL: unknown). The roles of the prefix it leans
on are its parent's: the parent's whole prompt roles, then ``ASSISTANT`` over the parent's sampled
tokens. A call whose own roles or any ancestor's along that chain are NULL (a call stored before
revision 0018, a capture that could not tell) has unknown roles as a whole: None, never a guess.

On the wire (REST) roles are runs, ``[[name, start, end], ...]`` with ``end`` exclusive, one run per
stretch of tokens of one role, named by ``ROLE_NAMES``: a 30k-token prompt is a few hundred runs.
Exports, whose other masks are per token, carry one ``TokenRole`` value per token instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from store.records import TokenRole

logger = logging.getLogger(__name__)

ROLES = np.dtype("u1")  # one TokenRole per token
ROLE_NAMES = tuple(role.name.lower() for role in TokenRole)  # a role's wire name, by its value
ASSISTANT_BYTE = bytes([TokenRole.ASSISTANT])
_KNOWN = len(ROLE_NAMES)


def stored_roles(roles: bytes | None, prompt_len: int, offset: int) -> bytes | None:
    """What a call stores of its prompt's roles (``CallRecord.prompt_roles``, one per prompt token): those
    past ``offset``, like its prompt ids. None when unknown, or when they do not cover the prompt token
    for token (a recorder's mistake: the call is stored with its roles unknown, not refused)."""
    if roles is None:
        return None
    if len(roles) != prompt_len:
        logger.warning("prompt roles of %d tokens for a prompt of %d: stored as unknown", len(roles), prompt_len)
        return None
    return bytes(roles[offset:])


def roles_array(blob: bytes | memoryview | None, length: int) -> np.ndarray | None:
    """uint8 [length]: a read-only view of whole prompt roles; None when unknown or not ``length`` long."""
    if blob is None or len(blob) != length:
        return None
    return np.frombuffer(blob, dtype=ROLES)


def role_runs(roles: np.ndarray | Sequence[int] | bytes | None) -> list[tuple[str, int, int]] | None:
    """Roles as runs ``(name, start, end)`` (``end`` exclusive); None stays None (unknown). A value that
    names no role reads as ``unknown``."""
    if roles is None:
        return None
    values = np.frombuffer(roles, dtype=ROLES) if isinstance(roles, bytes) else np.asarray(roles)
    if values.size == 0:
        return []
    values = np.where((values >= 0) & (values < _KNOWN), values, TokenRole.UNKNOWN).astype(np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(values)) + 1])
    ends = np.append(starts[1:], values.size)
    return [(ROLE_NAMES[values[s]], int(s), int(e)) for s, e in zip(starts.tolist(), ends.tolist())]


def roles_from_runs(runs: Sequence[Sequence] | None, length: int) -> np.ndarray | None:
    """uint8 [length] from runs (``role_runs``' form); None when unknown or when the runs do not cover
    exactly ``length`` tokens, one after another, with known names."""
    if runs is None:
        return None
    roles = np.empty(length, dtype=ROLES)
    position = 0
    for name, start, end in runs:
        if name not in ROLE_NAMES or start != position or not start <= end <= length:
            return None
        roles[start:end] = ROLE_NAMES.index(name)
        position = end
    return roles if position == length else None


def role_list(roles: np.ndarray | None) -> list[int] | None:
    """One TokenRole value per token (JSON), None when unknown: the exports' form."""
    return None if roles is None else roles.astype(np.int64).tolist()
