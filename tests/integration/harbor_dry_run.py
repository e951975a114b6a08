"""What Harbor would run for a sandbox, without running it: run by Harbor's Python, as the worker is.

    .venv-harbor/bin/python -I tests/integration/harbor_dry_run.py < requests.json > command_lines.json

stdin: a JSON list of the worker's requests (start, then any); stdout: every command line Harbor started,
in order. Harbor's subprocesses are replaced by ones that succeed at once with no output, so a type whose
tools this machine lacks (harbor:docker needs Docker Compose V2) shows its command lines all the same.
"""

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

captured: list[list[str]] = []


class Finished:
    """A process that has exited 0, having printed nothing."""

    returncode, stdout, stderr = 0, None, None

    async def communicate(self, input=None):
        return b"", b""

    async def wait(self):
        return 0

    def kill(self):
        pass


async def started(*argv, **kwargs):
    captured.append([str(a) for a in argv])
    return Finished()


def ran(argv, *args, **kwargs):
    captured.append([str(a) for a in argv])
    return subprocess.CompletedProcess(argv, 0, b"", b"")


def main() -> None:
    asyncio.create_subprocess_exec, subprocess.run = started, ran
    # the worker by its path: its folder holds our harbor.py, which must not shadow Harbor's package
    path = Path(__file__).resolve().parents[2] / "sandboxes" / "harbor_worker.py"
    spec = importlib.util.spec_from_file_location("harbor_worker", path)
    worker_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker_module)
    worker = worker_module.Worker(sys.stderr)

    async def run() -> None:
        for request in json.load(sys.stdin):
            await worker.run(request)

    asyncio.run(run())
    print(json.dumps(captured))


if __name__ == "__main__":
    main()
