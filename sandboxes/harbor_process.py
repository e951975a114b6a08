"""Our end of the process boundary to Harbor: where its Python is, and one worker process's requests.

Harbor needs Python >= 3.12 and dependencies of its own, so it runs in a virtual environment of its
own (``make harbor`` makes ``.venv-harbor``; ``HARNESSRL_HARBOR_PYTHON`` names another) and
``sandboxes/harbor_worker.py`` is its end: JSON lines over the worker's stdin and stdout, one Harbor
environment per worker. The worker's PATH starts with its virtual environment's bin folder, where
``make harbor`` installs podman-compose 1.x (Harbor's podman type drives it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
from pathlib import Path

from sandboxes.protocol import SandboxError

PYTHON_VARIABLE = "HARNESSRL_HARBOR_PYTHON"
DEFAULT_VENV = Path(__file__).resolve().parent.parent / ".venv-harbor"
WORKER = Path(__file__).with_name("harbor_worker.py")
STOP_TIMEOUT_S = 120.0  # seconds the worker may take to stop its environment after stdin closes


class HarborFailed(SandboxError):
    """Harbor (or the provider behind it) refused or failed an operation; the message is theirs."""


def harbor_python() -> Path:
    """The Python that has Harbor; SandboxError naming the fix when there is none."""
    named = os.environ.get(PYTHON_VARIABLE)
    python = Path(named) if named else DEFAULT_VENV / "bin" / "python"
    if not python.exists():
        where = f"{PYTHON_VARIABLE}={named}" if named else str(python)
        raise SandboxError(
            f"Harbor is not installed ({where} does not exist): run `make harbor` (a Python 3.12 virtual "
            f"environment with harbor and podman-compose), or set {PYTHON_VARIABLE} to a Python >= 3.12 "
            "that has `pip install harbor` (and the extra of your environment type)"
        )
    return python


class HarborProcess:
    """One worker process: requests by id, answers matched as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._gone = False  # its stdout closed: it answers nothing more
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls) -> HarborProcess:
        python = harbor_python()
        env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        process = await asyncio.create_subprocess_exec(
            str(python),
            "-I",  # isolated: not the worker's folder first on the path (our harbor.py is not Harbor's)
            str(WORKER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,  # Harbor's and the provider's logs go where ours go
            env=env,
            limit=64 * 2**20,
            start_new_session=True,  # Ctrl-C reaches us, and we stop the environment in order
        )
        return cls(process)

    async def request(self, op: str, **fields) -> dict:
        """The result of one operation; HarborFailed with the provider's error."""
        if self._gone or self.process.returncode is not None:
            raise HarborFailed(f"the Harbor worker exited before {op}")
        request_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            self.process.stdin.write(json.dumps({"id": request_id, "op": op, **fields}).encode() + b"\n")
            await self.process.stdin.drain()
            body = await answer
        except ConnectionError as exc:  # it went away between our check and the write
            raise HarborFailed(f"the Harbor worker exited before {op}: {exc}") from None
        finally:
            self._waiting.pop(request_id, None)
        if "error" in body:
            raise HarborFailed(f"Harbor {op}: {body['error']}")
        return body["result"]

    async def _read(self) -> None:
        while line := await self.process.stdout.readline():
            body = json.loads(line)
            answer = self._waiting.get(body.get("id"))
            if answer is not None and not answer.done():
                answer.set_result(body)
        self._gone = True  # no request waits from here on, and nobody answers the rest
        for answer in list(self._waiting.values()):
            if not answer.done():
                answer.set_result({"error": "the Harbor worker exited (its output closed)"})

    async def close(self) -> None:
        """Close stdin (the worker then stops its environment and exits) and wait for it, bounded."""
        with contextlib.suppress(ProcessLookupError, BrokenPipeError, ConnectionResetError):
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def preflight(env_type: str, options: dict[str, object]) -> None:
    """Harbor's own check of a type, its options and credentials, in a worker; SandboxError with its
    message (the extra to install, the variables it reads) when it fails."""
    process = await HarborProcess.start()
    try:
        await process.request("preflight", type=env_type, options=options)
    except HarborFailed as exc:
        raise SandboxError(f"--sandbox harbor:{env_type}: {preflight_message(str(exc))}") from None
    finally:
        await process.close()


def preflight_message(error: str) -> str:
    """Harbor's message without our framing and its exception's name, and, where it asks for an extra,
    where that extra goes: Harbor's own environment, not the project's."""
    message = re.sub(r"^Harbor preflight: \w+: ", "", error).strip()
    extra = re.search(r"pip install 'harbor\[([\w-]+)\]'", message)
    if extra:
        message = message.split("\n", 1)[0] + (
            f" Install it into Harbor's environment: `{harbor_python().parent / 'pip'} install "
            f"'harbor[{extra.group(1)}]'` (a new one: `make harbor HARBOR_EXTRAS=[{extra.group(1)}]`)."
        )
    return message
