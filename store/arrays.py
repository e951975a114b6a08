"""Packing token ids and logprobs as little-endian binary columns: the one owner of the format."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

IDS = np.dtype("<i4")  # token ids: int32, little-endian
LOGPROBS = np.dtype("<f4")  # log-probs: float32, little-endian
DELTAS = np.dtype("<f2")  # log-prob differences (call_mismatch): float16, little-endian, NaN = none


def pack_ids(ids: Sequence[int]) -> bytes:
    return np.asarray(ids, dtype=IDS).tobytes()


def ids_array(blob: bytes | memoryview, count: int = -1) -> np.ndarray:
    """int32 [n]: a read-only view of packed ids (the first ``count`` of them; -1: all)."""
    return np.frombuffer(blob, dtype=IDS, count=count)


def unpack_ids(blob: bytes) -> list[int]:
    return np.frombuffer(blob, dtype=IDS).tolist()


def pack_logprobs(logprobs: Sequence[float] | None) -> bytes | None:
    """None stays None: a call the policy did not sample (a teacher's) has no sampler log-probs."""
    return None if logprobs is None else np.asarray(logprobs, dtype=LOGPROBS).tobytes()


def unpack_logprobs(blob: bytes | None) -> list[float] | None:
    return None if blob is None else np.frombuffer(blob, dtype=LOGPROBS).tolist()


def logprobs_or_none(logprobs: np.ndarray) -> list[float | None]:
    """For JSON: each log-prob as a float, None where there is none (NaN: a teacher wrote the token)."""
    return [None if lp != lp else lp for lp in logprobs.astype(np.float64).tolist()]  # NaN != NaN


def logprobs_array(blob: bytes | None, length: int) -> np.ndarray:
    """float32 [length]: the sampler's log-probs, NaN for each token of a call the policy did not sample."""
    return np.full(length, np.nan, dtype=LOGPROBS) if blob is None else np.frombuffer(blob, dtype=LOGPROBS)


def pack_deltas(deltas: np.ndarray) -> bytes:
    return np.asarray(deltas, dtype=DELTAS).tobytes()


def deltas_array(blob: bytes) -> np.ndarray:
    """float32 [n]: packed deltas (NaN where nothing was compared)."""
    return np.frombuffer(blob, dtype=DELTAS).astype(np.float32)
