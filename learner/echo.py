"""ECHO's targets: the tool-result tokens of a sample, which the ``[loss] echo_weight`` term trains the policy to
predict (prime-rl's ``echo``): what the environment said back, tokens the policy reads anyway.

A token is an echo target when its role (``Sample.roles``, one ``store.records.TokenRole`` per token) is TOOL and
it is not the sample's first token (nothing in its own sample predicts that one). A sample whose roles are not
known (``roles`` None: built by hand, or read from calls stored before roles were) has none: it trains without
ECHO. Torch-free, so learner.groups can ask whether a sample has any without loading torch.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from store.records import TokenRole


class HasRoles(Protocol):
    input_ids: np.ndarray
    roles: np.ndarray | None  # int8 [T], a TokenRole per token; None: unknown


def echo_mask(sample: HasRoles) -> np.ndarray:
    """bool [T]: the sample's echo targets (TOOL tokens but the first); all False when its roles are unknown."""
    length = len(sample.input_ids)
    roles = getattr(sample, "roles", None)
    if roles is None:
        return np.zeros(length, bool)
    roles = np.asarray(roles)
    if roles.shape != (length,):
        raise ValueError(f"a sample of {length} tokens has {roles.shape[0] if roles.ndim else 0} roles")
    mask = roles == TokenRole.TOOL
    mask[:1] = False
    return mask


def has_echo_targets(sample: HasRoles) -> bool:
    return bool(echo_mask(sample).any())
