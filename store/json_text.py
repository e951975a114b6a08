"""JSON as the project writes it: orjson (a recorded call's bodies are encoded several times a call, and
the standard encoder took a twentieth of its CPU), the standard encoder for what orjson refuses (integers
past 64 bits, keys that are no strings). Arrays are written as lists. The store's JSON columns and the
gateway's engine requests both use it."""

from __future__ import annotations

import json

import numpy as np
import orjson


def json_bytes(value) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:
        return json.dumps(value, default=_as_list).encode()


class EncodedJSON:
    """A value encoded ahead of its insert, so its size is known (``store.stored_bytes``) without encoding
    it twice: ``json_text`` writes its text as it is."""

    __slots__ = ("text", "size")

    def __init__(self, value):
        encoded = json_bytes(value)
        self.text, self.size = encoded.decode(), len(encoded)


def json_text(value) -> str:
    """A JSON column's text (SQLAlchemy's ``json_serializer``)."""
    if type(value) is EncodedJSON:
        return value.text
    return json_bytes(value).decode()


def _as_list(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
