"""The suite's cap on running vLLM engines (tests/engine_shelf.py), on stand-in engines."""

from __future__ import annotations

import pytest

from tests.engine_shelf import MAX_ENGINES_ENV, EngineShelf, ShelfView, max_engines


class StandIn:
    def __init__(self, name: str, log: list[str]):
        self.url, self._log, self._running = f"http://{name}", log, False

    def start(self) -> StandIn:
        self._running = True
        self._log.append(f"start {self.url}")
        return self

    def wait_healthy(self, timeout_s: float) -> None:
        assert self._running

    def alive(self) -> bool:
        return self._running

    def stop(self) -> None:
        self._running = False
        self._log.append(f"stop {self.url}")


def shelf_of(names: str, cap: int) -> tuple[EngineShelf, dict[str, StandIn], list[str]]:
    log: list[str] = []
    shelf, engines = EngineShelf(cap, start_timeout_s=1), {}
    for name in names.split():
        engines[name] = StandIn(name, log)
        shelf.add(name, engines[name])
    return shelf, engines, log


def test_an_engine_starts_when_first_asked_for_and_once():
    shelf, engines, log = shelf_of("tiny smollm2", cap=2)
    assert log == []
    assert shelf.get("tiny") is engines["tiny"] and shelf.get("tiny") is engines["tiny"]
    assert log == ["start http://tiny"]


def test_the_least_recently_used_engine_of_an_earlier_module_stops_to_keep_the_cap():
    shelf, engines, log = shelf_of("a b c", cap=2)
    shelf.get("a"), shelf.get("b")
    shelf.next_module()
    shelf.get("b")
    shelf.get("c")
    assert shelf.running() == ["b", "c"] and "stop http://a" in log
    shelf.next_module()
    shelf.get("a")  # started again when asked for again
    assert not engines["b"].alive() and shelf.running() == ["c", "a"]


def test_a_test_with_engines_of_its_own_gets_room_and_engines_it_holds_stay():
    shelf, engines, _ = shelf_of("a b c", cap=3)
    for name in "abc":
        shelf.get(name)
    shelf.next_module()
    shelf.get("b")
    shelf.next_test()
    shelf.make_room(2)
    assert shelf.running() == ["b"]
    shelf.get("b")  # held: still running, nothing else stops


def test_a_module_over_the_cap_fails_naming_the_cap():
    shelf, _, _ = shelf_of("a b", cap=1)
    shelf.get("a")
    with pytest.raises(RuntimeError, match=MAX_ENGINES_ENV):
        shelf.get("b")


def test_a_dead_engine_is_started_again():
    shelf, engines, log = shelf_of("a", cap=1)
    shelf.get("a").stop()
    assert shelf.get("a").alive() and log.count("start http://a") == 2


def test_the_view_starts_engines_on_access_only():
    shelf, _, log = shelf_of("tiny smollm2", cap=2)
    view = ShelfView(shelf, ("tiny", "smollm2"))
    assert list(view) == ["tiny", "smollm2"] and log == []
    assert view["smollm2"].url == "http://smollm2" and log == ["start http://smollm2"]
    with pytest.raises(KeyError):
        view["other"]


def test_the_cap_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(MAX_ENGINES_ENV, "2")
    assert max_engines() == 2
    monkeypatch.setenv(MAX_ENGINES_ENV, "zero")
    with pytest.raises(ValueError, match="whole number"):
        max_engines()
