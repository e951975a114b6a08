"""A learner's settings folder: how the jobs that make runs hand them to the one learner that trains them all.

`harnessrl train --run A --run B --settings-dir DIR` trains each named run once ``DIR/<run>.toml`` (its
whole learner settings, as `train --config` reads them) is there. A job (`quickstart --learner-folder DIR`)
writes it when its run is ready to train: after a warm start, naming that start's adapter. The job asks
its run's training to stop with ``DIR/<run>.stop``; the learner writes ``DIR/<run>.result.json`` when that
policy ends (stopped, failed and why, or max_steps), and its pid to ``DIR/learner.pid`` while it runs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from harnessrl.config.files import load_config, to_toml
from learner.config import LearnerConfig

if TYPE_CHECKING:
    from learner.policy_slot import SlotResult


class LearnerFolder:
    def __init__(self, path: Path):
        self.path = Path(path)

    def _file(self, run: str, suffix: str) -> Path:
        return self.path / f"{run}{suffix}"

    def offer(self, run: str, settings: LearnerConfig) -> None:
        """Hand ``run`` to the learner with ``settings`` (what an earlier job of the run left is cleared)."""
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in (".stop", ".result.json"):
            self._file(run, stale).unlink(missing_ok=True)
        _write(self._file(run, ".toml"), to_toml(settings))  # no admin key (a secret): the learner has its own

    def settings(self, run: str) -> LearnerConfig | None:
        """``run``'s settings, None until its job wrote them."""
        file = self._file(run, ".toml")
        return load_config(LearnerConfig, file, {}) if file.exists() else None

    def ask_stop(self, run: str) -> None:
        self._file(run, ".stop").touch()

    def stop_asked(self, run: str) -> bool:
        return self._file(run, ".stop").exists()

    def write_result(self, result: SlotResult) -> None:
        _write(self._file(result.run, ".result.json"), json.dumps(asdict(result)))

    def result(self, run: str) -> dict | None:
        file = self._file(run, ".result.json")
        return json.loads(file.read_text()) if file.exists() else None

    def claim(self) -> None:
        """Mark this process as the folder's learner (jobs watch it: a learner that died trains nothing)."""
        self.path.mkdir(parents=True, exist_ok=True)
        _write(self.path / "learner.pid", str(os.getpid()))

    def learner_pid(self) -> int | None:
        file = self.path / "learner.pid"
        return int(file.read_text()) if file.exists() else None


class SharedLearner:
    """A job's handle on the folder's learner, for its own run: what a job asks of the learner process it
    would otherwise start (``ManagedProcess``'s alive, stop and why)."""

    def __init__(self, folder: LearnerFolder, run: str, sleep=time.sleep, clock=time.monotonic):
        self.folder, self.run = folder, run
        self._sleep, self._clock = sleep, clock

    def alive(self) -> bool:
        """Still training this run: it has no result yet and the learner runs (or has not started yet)."""
        return self.folder.result(self.run) is None and self._learner_runs()

    def _learner_runs(self) -> bool:
        pid = self.folder.learner_pid()
        if pid is None:
            return True  # started beside this job, not up yet
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def stop(self, timeout_s: float = 20.0) -> None:
        """Ask the learner to stop training this run (it finishes its step and keeps its work); wait up to
        ``timeout_s`` for it to have."""
        self.folder.ask_stop(self.run)
        deadline = self._clock() + timeout_s
        while self.alive() and self._clock() < deadline:
            self._sleep(0.5)

    def why(self) -> str:
        result = self.folder.result(self.run)
        if result is not None and result["error"]:
            return f"the learner stopped training {self.run}: {result['error']}"
        if result is not None:
            return f"the learner stopped training {self.run} ({result['reason']}, step {result['step']})"
        return f"the learner of {self.folder.path} (pid {self.folder.learner_pid()}) ended: see its log"


def _write(file: Path, text: str) -> None:
    """Whole or not at all: the learner never reads a half-written file."""
    partial = file.with_name(file.name + ".partial")
    partial.write_text(text)
    partial.replace(file)
