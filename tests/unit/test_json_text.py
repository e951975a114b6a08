"""The project's JSON: orjson's text, the standard encoder's where orjson refuses, arrays as lists."""

from __future__ import annotations

import json

import numpy as np

from store.json_text import json_bytes, json_text


def test_values_orjson_refuses_are_written_by_the_standard_encoder_with_the_same_meaning():
    for value in ({"seed": 2**70}, {1: "int key"}, {"ids": np.asarray([1, 2], "<i4"), "big": 2**70}):
        expected = json.loads(json.dumps(value, default=lambda a: a.tolist()))
        assert json.loads(json_bytes(value)) == expected == json.loads(json_text(value))


def test_plain_values_and_arrays_are_orjsons_compact_text():
    assert json_text({"a": [1, 2.5, None], "ids": np.asarray([3, 4], "<i4")}) == '{"a":[1,2.5,null],"ids":[3,4]}'
