"""When quickstart's rounds stop: the time budget, then a step count (``until_version``), never a dead learner."""

from __future__ import annotations

import time

import pytest

from harnessrl.quickstart import Quickstart, QuickstartPlan


class Learner:
    def __init__(self, alive: bool):
        self._alive = alive

    def alive(self) -> bool:
        return self._alive


class Gateway:
    def __init__(self, version: int):
        self.version = version

    async def policy(self) -> dict:
        return {"current_version": self.version}


def quickstart(tmp_path, monkeypatch, until_version: int) -> Quickstart:
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    plan = QuickstartPlan(run="q", model_dir=tmp_path, tasks=[], database_url="sqlite://", until_version=until_version)
    return Quickstart(plan)


@pytest.mark.parametrize(("version", "going"), [(0, True), (1, True), (2, False), (3, False)])
async def test_past_the_time_budget_rounds_go_on_until_the_version_is_published(tmp_path, monkeypatch, version, going):
    past = time.monotonic() - 1
    assert await quickstart(tmp_path, monkeypatch, 2)._going(Gateway(version), past, Learner(True)) is going


async def test_within_the_time_budget_rounds_go_on_whatever_the_version(tmp_path, monkeypatch):
    ahead = time.monotonic() + 3600
    assert await quickstart(tmp_path, monkeypatch, 0)._going(Gateway(0), ahead, Learner(True))


async def test_a_dead_learner_ends_the_rounds(tmp_path, monkeypatch):
    ahead = time.monotonic() + 3600
    assert not await quickstart(tmp_path, monkeypatch, 5)._going(Gateway(0), ahead, Learner(False))
