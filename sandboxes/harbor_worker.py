"""The far end of the Harbor backend: one Harbor environment, driven over JSON lines on stdin/stdout.

Harbor (``harbor`` on the package index) needs Python >= 3.12 and brings its own dependencies, so it
lives in a virtual environment of its own (``make harbor``: ``.venv-harbor``) and this file is run by
that environment's Python as a script: standard library and ``harbor`` only, no imports of ours.
``sandboxes/harbor.py`` starts one such process per sandbox and speaks to it:

    request:  {"id": 3, "op": "exec", "command": "...", "cwd": "/app", "env": {...}, "timeout_s": 60}
    answer:   {"id": 3, "result": {"return_code": 0, "stdout": "...", "stderr": ""}}
              {"id": 3, "error": "...the provider's error..."}

Operations: ``preflight`` (the type's extra and credentials, before any rollout), ``start``,
``exec``, ``upload_file``, ``download_file``, ``upload_dir``, ``download_dir``, ``stop``. Requests run
concurrently; answers come in any order, each naming its request. When stdin closes (the parent is
gone, however it ended) or on SIGTERM the environment is stopped and deleted, so nothing is left running.

Harbor and the tools it drives may print; the protocol keeps the original stdout, and everything else
written to file descriptor 1 goes to stderr.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path


def protocol_stream():
    """The original stdout for answers; fd 1 then points at stderr for whoever else prints."""
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return answers


def environment_class(env_type: str):
    """Harbor's class for a type; ImportError names the extra, ValueError the unknown type."""
    from harbor.environments.factory import EnvironmentFactory
    from harbor.models.environment_type import EnvironmentType

    try:
        kind = EnvironmentType(env_type)
    except ValueError:
        known = ", ".join(EnvironmentFactory.registered_names())
        raise ValueError(f"Harbor has no environment type {env_type!r}; it has: {known}") from None
    return kind, EnvironmentFactory.get_environment_class(kind)


def preflight(env_type: str, options: dict) -> dict:
    """The type loads (its extra is installed), its options parse and its credentials are there."""
    kind, cls = environment_class(env_type)
    # The constructor's own keyword arguments (extra_docker_compose, mounts, ...) are not the type's
    # options model, which preflight validates; the rest are.
    own = {
        name
        for klass in cls.__mro__
        if "__init__" in vars(klass)
        for name in inspect.signature(klass.__init__).parameters
    }
    try:
        cls.preflight(kwargs={key: value for key, value in options.items() if key not in own})
    except SystemExit as exc:  # Harbor's preflight exits with the message naming what is missing
        raise RuntimeError(str(exc.code)) from None
    return {"type": kind.value}


class Worker:
    def __init__(self, answers) -> None:
        self.answers = answers
        self.environment = None
        self.trial_dir: Path | None = None
        self._write = asyncio.Lock()

    async def answer(self, request_id, **body) -> None:
        async with self._write:
            self.answers.write(json.dumps({"id": request_id, **body}) + "\n")
            self.answers.flush()

    async def handle(self, request: dict) -> None:
        try:
            result = await self.run(request)
        except BaseException as exc:  # noqa: BLE001 - every failure is the caller's to report
            if isinstance(exc, asyncio.CancelledError):
                raise
            logging.getLogger(__name__).debug("%s", traceback.format_exc())
            await self.answer(request.get("id"), error=f"{type(exc).__name__}: {exc}")
        else:
            await self.answer(request.get("id"), result=result)

    async def run(self, request: dict):
        op = request["op"]
        if op == "preflight":
            return preflight(request["type"], request.get("options") or {})
        if op == "start":
            return await self.start(request)
        if op == "stop":
            return await self.stop()
        if self.environment is None:
            raise RuntimeError(f"{op} before start")
        env = self.environment
        if op == "exec":
            result = await env.exec(
                request["command"],
                cwd=request.get("cwd"),
                env=request.get("env") or None,
                timeout_sec=request.get("timeout_s"),
                user=request.get("user"),
            )
            return {"return_code": result.return_code, "stdout": result.stdout or "", "stderr": result.stderr or ""}
        transfers = {
            "upload_file": env.upload_file,
            "download_file": env.download_file,
            "upload_dir": env.upload_dir,
            "download_dir": env.download_dir,
        }
        if op in transfers:
            await transfers[op](request["source"], request["target"])
            return {}
        raise ValueError(f"unknown operation {op!r}")

    async def start(self, request: dict) -> dict:
        from harbor.environments.factory import EnvironmentFactory
        from harbor.models.task.config import EnvironmentConfig
        from harbor.models.trial.paths import TrialPaths

        kind, _ = environment_class(request["type"])
        self.trial_dir = Path(tempfile.mkdtemp(prefix="harnessrl-harbor-"))
        environment_dir = self.trial_dir / "environment"
        environment_dir.mkdir()
        paths = TrialPaths(trial_dir=self.trial_dir)
        paths.mkdir()
        config = EnvironmentConfig(
            docker_image=request["image"],
            workdir=request.get("workdir"),
            cpus=request.get("cpus"),
            memory_mb=request.get("memory_mb"),
        )
        self.environment = EnvironmentFactory.create_environment(
            type=kind,
            environment_dir=environment_dir,
            environment_name=request["name"],
            session_id=request["name"],
            trial_paths=paths,
            task_env_config=config,
            **(request.get("options") or {}),
        )
        await self.environment.start(force_build=False)
        return {}

    async def stop(self) -> dict:
        """The environment stopped and deleted, then its trial folder (also after a start that failed)."""
        environment, self.environment = self.environment, None
        trial_dir, self.trial_dir = self.trial_dir, None
        try:
            if environment is not None:
                await environment.stop(delete=True)
        finally:
            if trial_dir is not None:
                shutil.rmtree(trial_dir, ignore_errors=True)
        return {}


async def serve(answers) -> None:
    worker = Worker(answers)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    tasks: set[asyncio.Task] = set()
    try:
        while not stopping.is_set():
            line_read = asyncio.ensure_future(reader.readline())
            stop_wait = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({line_read, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if not line_read.done():
                line_read.cancel()
                break
            line = line_read.result()
            if not line:
                break  # the parent is gone
            task = asyncio.ensure_future(worker.handle(json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await worker.stop()


def main() -> None:
    answers = protocol_stream()
    level = os.environ.get("HARNESSRL_HARBOR_LOG", "WARNING")
    logging.basicConfig(level=level, stream=sys.stderr)
    logging.root.handlers[0].setLevel(level)  # Harbor sets DEBUG on its own loggers
    asyncio.run(serve(answers))


if __name__ == "__main__":
    main()
