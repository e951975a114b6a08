"""httpx's verbs for tests, with a timeout a busy machine meets.

httpx's own default (5 s per read) is a clock: under ``make test-busy`` (load average 19) a gateway took
longer than that to create a rollout, and the test failed for the machine's load, not for the code.
A test that means to check a timeout passes its own ``timeout=``.
"""

from __future__ import annotations

import httpx

TIMEOUT_S = 300.0  # a guard against a hang, not a speed check


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, **{"timeout": TIMEOUT_S, **kwargs})


def post(url: str, **kwargs) -> httpx.Response:
    return httpx.post(url, **{"timeout": TIMEOUT_S, **kwargs})


def put(url: str, **kwargs) -> httpx.Response:
    return httpx.put(url, **{"timeout": TIMEOUT_S, **kwargs})


def delete(url: str, **kwargs) -> httpx.Response:
    return httpx.delete(url, **{"timeout": TIMEOUT_S, **kwargs})
