"""The suite's vLLM-CPU engines, at most a few running at once.

Each engine takes 2-4 GB. The suite's shared engines (the tiny model, SmolLM2, the long-context tiny
one) used to start once and run to the end of the session, and the tests that start engines of their
own (quickstart, scale-out, serve, the engine pool) added theirs on top: up to six at once, enough to
push a 24 GB machine into swap or the OOM killer when other work shares it.

The shelf starts a shared engine when a test first asks for it and stops the least recently used one
when another must start, or when a test declares engines of its own (``@pytest.mark.engines(N)``).
Engines asked for by the current module are held: its module-scoped fixtures may have kept their URLs.
A module whose needs exceed the cap fails with a message naming the cap, never waits or swaps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Protocol

MAX_ENGINES_ENV = "HARNESSRL_TEST_MAX_ENGINES"
DEFAULT_MAX_ENGINES = 3  # 3 x 2-4 GB beside the suite's gateways and learners fits 24 GB with room to spare


class Engine(Protocol):  # harnessrl.engine.process.ManagedProcess
    url: str

    def start(self) -> object: ...

    def wait_healthy(self, timeout_s: float) -> None: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...


def max_engines() -> int:
    value = os.environ.get(MAX_ENGINES_ENV, str(DEFAULT_MAX_ENGINES))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{MAX_ENGINES_ENV}={value!r}: give a whole number of engines, at least 1")
    return int(value)


class EngineShelf:
    def __init__(self, cap: int, start_timeout_s: float):
        self.cap, self.start_timeout_s = cap, start_timeout_s
        self._engines: dict[str, Engine] = {}
        self._used: list[str] = []  # running shared engines, least recently used first
        self._held: set[str] = set()  # asked for by the current module
        self._own = 0  # engines the current test starts itself

    def add(self, name: str, engine: Engine) -> None:
        """Put an engine (not started) on the shelf; it starts when first asked for."""
        self._engines[name] = engine

    def has(self, name: str) -> bool:
        return name in self._engines

    def get(self, name: str) -> Engine:
        """The named engine, running and healthy; held until the module ends."""
        engine = self._engines[name]
        self._held.add(name)
        if name in self._used and engine.alive():
            self._used.remove(name)
        else:
            self._forget(name)
            self._free_slots(1)
            engine.start()
            engine.wait_healthy(self.start_timeout_s)
        self._used.append(name)
        return engine

    def make_room(self, own: int) -> None:
        """The current test starts ``own`` engines itself: stop shared ones until they fit beside."""
        self._free_slots(own)
        self._own = own

    def next_module(self) -> None:
        self._held.clear()

    def next_test(self) -> None:
        self._own = 0

    def running(self) -> list[str]:
        return [name for name in self._used if self._engines[name].alive()]

    def stop_all(self) -> None:
        for name in list(self._used):
            self._engines[name].stop()
        self._used.clear()

    def _free_slots(self, slots: int) -> None:
        for name in [n for n in self._used if not self._engines[n].alive()]:
            self._forget(name)
        while len(self._used) + self._own + slots > self.cap:
            idle = [name for name in self._used if name not in self._held]
            if not idle:
                raise RuntimeError(
                    f"this module needs more than {self.cap} vLLM engines at once (running: {self._used}, "
                    f"{self._own + slots} of the test's own); raise {MAX_ENGINES_ENV} if memory allows"
                )
            self._engines[idle[0]].stop()
            self._used.remove(idle[0])

    def _forget(self, name: str) -> None:
        if name in self._used:
            self._used.remove(name)


class ShelfView(Mapping[str, Engine]):
    """``vllm_servers["tiny"]``: the shelf's engine, started (again) on access."""

    def __init__(self, shelf: EngineShelf, names: tuple[str, ...]):
        self._shelf, self._names = shelf, names

    def __getitem__(self, name: str) -> Engine:
        if name not in self._names:
            raise KeyError(name)
        return self._shelf.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
