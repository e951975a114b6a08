"""Our end of the Harbor boundary without Harbor: the exec output's decoding, preflight messages, where
Harbor's Python is, the JSON-lines requests against a stand-in worker, and the worker's clean-up."""

from __future__ import annotations

import asyncio
import base64
import sys
import textwrap

import pytest

from sandboxes import SandboxError
from sandboxes.harbor import KILL_ALL, MARK, decoded_exec
from sandboxes.harbor_process import PYTHON_VARIABLE, HarborFailed, HarborProcess, harbor_python, preflight_message
from sandboxes.harbor_worker import Worker

GUARD_S = 60  # only against a hang: every answer here comes in well under a second

ISLO = (
    "The 'islo' environment requires extra dependencies. Install them with:\n"
    "  pip install 'harbor[islo]'\n"
    "  uv tool install 'harbor[islo]'\n"
    "Or install all cloud environments with 'harbor[cloud]'."
)


def merged(stdout: bytes, stderr: bytes, before: str = "", after: str = "") -> str:
    """Harbor's merged output of HarborSandbox.exec's script on a TTY: `echo MARK; base64 f.out; ...`,
    each line ending in CRLF, base64 wrapping at 76 characters as GNU base64 does."""

    def wrapped(data: bytes) -> str:
        text = base64.b64encode(data).decode()
        return "".join(f"{text[i : i + 76]}\r\n" for i in range(0, len(text), 76))

    return f"{before}{MARK}\r\n{wrapped(stdout)}{MARK}\r\n{wrapped(stderr)}{MARK}{after}"


def test_exec_output_splits_back_into_stdout_and_stderr_across_crlf_and_wrapping():
    stdout = b"line one\nline two\n" + b"x" * 500  # many wrapped base64 lines
    stderr = b"oops\r\n" * 40
    output = merged(stdout, stderr, after="\r\n")
    assert output.count("\r\n") > 10 and max(len(line) for line in output.split("\r\n")) <= 76 + len(MARK)
    assert decoded_exec(output, 3) == (3, stdout, stderr)


def test_exec_output_keeps_binary_bytes_and_empty_parts():
    binary = bytes(range(256)) * 3
    assert decoded_exec(merged(binary, b""), 0) == (0, binary, b"")
    assert decoded_exec(merged(b"", binary), 1) == (1, b"", binary)
    assert decoded_exec(merged(b"", b""), 0) == (0, b"", b"")


def test_exec_output_ignores_what_came_before_the_first_marker():
    output = merged(b"out", b"err", before="bash: no job control in this shell\r\n", after="\r\n")
    assert decoded_exec(output, 0) == (0, b"out", b"err")


@pytest.mark.parametrize(
    ("output", "code", "expected_code"),
    [
        ("sh: 1: base64: not found\r\n", 0, 127),
        ("sh: 1: base64: not found\r\n", 2, 2),
        ("", 0, 127),
        (f"{MARK}\r\nb3V0\r\n{MARK}\r\n", 0, 127),  # cut off before the last marker (Harbor's timeout)
        (f"{MARK}\r\nb3V0\r\n{MARK}\r\n", 137, 137),
    ],
)
def test_exec_output_without_the_markers_is_stderr_with_a_failing_code(output, code, expected_code):
    assert decoded_exec(output, code) == (expected_code, b"", output.encode())


def test_the_kill_all_script_spares_pid_1_itself_and_its_caller():
    for spared in ('[ "$p" = 1 ]', '[ "$p" = $$ ]', '[ "$p" = $PPID ]', 'case " $1 "'):
        assert spared in KILL_ALL
    assert "kill -9" in KILL_ALL


def test_preflight_message_drops_our_framing_and_the_exception_name():
    framed = "Harbor preflight: RuntimeError: DAYTONA_API_KEY is not set"
    assert preflight_message(framed) == "DAYTONA_API_KEY is not set"
    assert preflight_message("Harbor preflight: ValueError: Harbor has no environment type 'vm'\n") == (
        "Harbor has no environment type 'vm'"
    )
    assert preflight_message("something else entirely") == "something else entirely"


def test_preflight_message_for_a_missing_extra_names_harbors_own_pip(monkeypatch, tmp_path):
    python = tmp_path / "venv-harbor" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    monkeypatch.setenv(PYTHON_VARIABLE, str(python))
    message = preflight_message(f"Harbor preflight: RuntimeError: {ISLO}")
    first_line = "The 'islo' environment requires extra dependencies. Install them with:"
    assert message.startswith(first_line)
    assert f"`{python.parent / 'pip'} install 'harbor[islo]'`" in message
    assert "make harbor HARBOR_EXTRAS=[islo]" in message
    assert "uv tool install" not in message and "\n" not in message  # Harbor's own lines are replaced


def test_a_missing_harbor_python_names_make_harbor_and_the_variable(monkeypatch, tmp_path):
    missing = tmp_path / "no-such-python"
    monkeypatch.setenv(PYTHON_VARIABLE, str(missing))
    with pytest.raises(SandboxError, match="make harbor") as refused:
        harbor_python()
    assert f"{PYTHON_VARIABLE}={missing}" in str(refused.value)


def test_a_named_harbor_python_that_exists_is_used(monkeypatch):
    monkeypatch.setenv(PYTHON_VARIABLE, sys.executable)
    assert str(harbor_python()) == sys.executable


STAND_IN = textwrap.dedent(
    """
    # A stand-in for sandboxes/harbor_worker.py: the same JSON lines, no Harbor. Ops:
    #   echo: {"value": v, "nth": its place among the answers}, once the request tagged `after` (if any)
    #         has been answered
    #   fail: an error answer; hang: never answered; die: exit at once, answering nothing
    import json, os, sys, threading

    lock, answered, count = threading.Lock(), {}, [0]

    def answer(request, **body):
        with lock:
            count[0] += 1
            if "result" in body:
                body["result"]["nth"] = count[0]
            sys.stdout.write(json.dumps({"id": request["id"], **body}) + "\\n")
            sys.stdout.flush()
        if request.get("tag"):
            answered.setdefault(request["tag"], threading.Event()).set()

    def handle(request):
        op = request["op"]
        if op == "echo":
            if request.get("after"):
                answered.setdefault(request["after"], threading.Event()).wait()
            answer(request, result={"value": request["value"]})
        elif op == "fail":
            answer(request, error="RuntimeError: the provider said no")
        elif op == "die":
            os._exit(3)
        elif op == "linger":  # its stdout closes, but it exits only once told to by a file
            os.close(1)
            while not os.path.exists(request["until"]):
                threading.Event().wait(0.01)
            os._exit(4)

    for line in sys.stdin:
        request = json.loads(line)
        threading.Thread(target=handle, args=(request,), daemon=True).start()
    with open(sys.argv[0] + ".eof", "w") as done:  # stdin closed: the parent is gone
        done.write("stopped")
    os._exit(0)
    """
)


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    script = tmp_path / "stand_in_worker.py"
    script.write_text(STAND_IN)
    monkeypatch.setenv(PYTHON_VARIABLE, sys.executable)
    monkeypatch.setattr("sandboxes.harbor_process.WORKER", script)
    return script


async def test_concurrent_requests_each_get_their_own_answer_in_any_order(stand_in):
    worker = await HarborProcess.start()
    try:
        first = asyncio.ensure_future(worker.request("echo", value="one", tag="a", after="b"))
        second = asyncio.ensure_future(worker.request("echo", value=[2, "two"], tag="b"))
        answers = await asyncio.wait_for(asyncio.gather(first, second), GUARD_S)
        assert answers == [{"value": "one", "nth": 2}, {"value": [2, "two"], "nth": 1}]  # request 2 answered first
        many = await asyncio.wait_for(asyncio.gather(*(worker.request("echo", value=i) for i in range(20))), GUARD_S)
        assert [answer["value"] for answer in many] == list(range(20))
        assert sorted(answer["nth"] for answer in many) == list(range(3, 23))
    finally:
        await worker.close()


async def test_an_error_answer_is_harbor_failed_with_the_providers_message(stand_in):
    worker = await HarborProcess.start()
    try:
        with pytest.raises(HarborFailed, match=r"^Harbor fail: RuntimeError: the provider said no$"):
            await asyncio.wait_for(worker.request("fail"), GUARD_S)
        assert (await asyncio.wait_for(worker.request("echo", value=1), GUARD_S))["value"] == 1  # still serving
    finally:
        await worker.close()


async def test_when_the_worker_dies_pending_and_later_requests_fail(stand_in):
    worker = await HarborProcess.start()
    try:
        pending = asyncio.ensure_future(worker.request("hang"))
        await asyncio.sleep(0)  # written before the worker dies
        with pytest.raises(HarborFailed, match=r"worker exited"):
            await asyncio.wait_for(worker.request("die"), GUARD_S)
        with pytest.raises(HarborFailed, match=r"worker exited"):
            await asyncio.wait_for(pending, GUARD_S)
        with pytest.raises(HarborFailed, match=r"worker exited before echo"):
            await asyncio.wait_for(worker.request("echo", value=1), GUARD_S)
    finally:
        await asyncio.wait_for(worker.close(), GUARD_S)


async def test_close_returns_once_the_worker_exits_on_stdin_eof(stand_in):
    worker = await HarborProcess.start()
    assert (await asyncio.wait_for(worker.request("echo", value="up"), GUARD_S))["value"] == "up"
    await asyncio.wait_for(worker.close(), GUARD_S)
    assert worker.process.returncode == 0
    assert (stand_in.parent / f"{stand_in.name}.eof").read_text() == "stopped"  # it saw EOF, was not killed
    with pytest.raises(HarborFailed, match="before echo"):
        await worker.request("echo", value=1)


async def test_starting_without_harbor_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv(PYTHON_VARIABLE, str(tmp_path / "missing" / "python"))
    with pytest.raises(SandboxError, match="make harbor"):
        await HarborProcess.start()


async def test_a_worker_whose_output_closed_before_it_exited_fails_every_request_and_closes(stand_in, tmp_path):
    """Between its stdout closing and its exit (an interpreter shutting down), nothing may hang or crash."""
    worker = await HarborProcess.start()
    until = tmp_path / "exit-now"
    try:
        pending = asyncio.ensure_future(worker.request("hang"))
        with pytest.raises(HarborFailed):
            await asyncio.wait_for(worker.request("linger", until=str(until)), GUARD_S)
        with pytest.raises(HarborFailed):  # asked while the worker lingers: refused, never waiting
            await asyncio.wait_for(worker.request("echo", value=1), GUARD_S)
        until.write_text("go")
        with pytest.raises(HarborFailed, match="exited"):
            await asyncio.wait_for(pending, GUARD_S)
    finally:
        until.write_text("go")
        await asyncio.wait_for(worker.close(), GUARD_S)


class StoppedEnvironment:
    """Stands in for a Harbor environment: what its stop was asked."""

    def __init__(self) -> None:
        self.stops: list[bool] = []

    async def stop(self, delete: bool) -> None:
        self.stops.append(delete)


@pytest.mark.parametrize("started", [True, False], ids=["started", "start failed"])
async def test_the_worker_removes_its_trial_folder_when_it_stops(tmp_path, started):
    worker = Worker(answers=None)
    worker.trial_dir = tmp_path / "harnessrl-harbor-x"
    (worker.trial_dir / "environment").mkdir(parents=True)
    environment = StoppedEnvironment() if started else None
    worker.environment = environment
    await worker.stop()
    assert not (tmp_path / "harnessrl-harbor-x").exists()
    assert environment is None or environment.stops == [True]
    await worker.stop()  # serve's own stop at exit, after the caller's: nothing left to do
