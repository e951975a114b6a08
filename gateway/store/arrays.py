"""Packing token ids and logprobs as little-endian binary columns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_IDS = np.dtype("<i4")
_LOGPROBS = np.dtype("<f4")


def pack_ids(ids: Sequence[int]) -> bytes:
    return np.asarray(ids, dtype=_IDS).tobytes()


def unpack_ids(blob: bytes) -> list[int]:
    return np.frombuffer(blob, dtype=_IDS).tolist()


def pack_logprobs(logprobs: Sequence[float]) -> bytes:
    return np.asarray(logprobs, dtype=_LOGPROBS).tobytes()


def unpack_logprobs(blob: bytes) -> list[float]:
    return np.frombuffer(blob, dtype=_LOGPROBS).tolist()
