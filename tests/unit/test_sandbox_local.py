"""The local sandbox (plain subprocess, and bubblewrap where installed) and the gateway forwarders."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from sandboxes import Limits, SandboxError, SandboxSpec, create_sandbox
from sandboxes.bridge import HostBridge
from sandboxes.forwarder import serve_tcp_to_unix
from sandboxes.route import Route
from sandboxes.urls import inside_url
from tests.waiting import until

HAS_BWRAP = shutil.which("bwrap") is not None
ISOLATIONS = [
    "subprocess",
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed (apt-get install -y bubblewrap)"),
    ),
]


@pytest.fixture(params=ISOLATIONS)
def isolation(request) -> str:
    return request.param


async def make(isolation: str, **spec) -> object:
    return await create_sandbox("local", SandboxSpec(**spec), isolation=isolation)


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains marker (works across pid namespaces)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_exec_output_exit_code_and_env(isolation):
    async with await make(isolation, env={"A": "spec", "B": "spec"}) as sb:
        result = await sb.exec('echo "$A $B"; echo oops >&2; exit 3', env={"B": "exec"}, timeout_s=60)
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"spec exec\n", b"oops\n")
        assert not result.timed_out and result.killed_reason is None
        listed = await sb.exec(["printf", "%s|", "a b", "c"], timeout_s=60)
        assert listed.stdout == b"a b|c|" and listed.ok
        missing = await sb.exec(["no-such-program-xyz"], timeout_s=60)
        assert missing.exit_code != 0 and b"no-such-program-xyz" in missing.stderr  # never raises


async def test_cwd_defaults_to_the_workspace(isolation):
    async with await make(isolation, files={"sub/f.txt": b"x"}) as sb:
        assert (await sb.exec("pwd", timeout_s=60)).stdout.decode().strip() == sb.workspace
        assert (await sb.exec("cat f.txt", cwd="sub", timeout_s=60)).stdout == b"x"


async def test_timeout_kills_the_whole_process_group(isolation):
    marker = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"  # a unique sleep length
    async with await make(isolation) as sb:
        started = time.monotonic()
        result = await sb.exec(f"sleep {marker} & sleep {marker}; echo never", timeout_s=0.5)
        assert time.monotonic() - started < 60  # killed at its timeout, not after the 1000 s+ sleep
        assert result.timed_out and result.killed_reason == "timeout" and result.exit_code == 137
        assert b"never" not in result.stdout
        # SIGKILL is asynchronous: the kernel reaps them a moment later (seconds on a busy machine)
        await until(lambda: not host_processes_with(f"sleep {marker}"), "the killed sleeps to be gone")


async def test_wall_time_ends_the_sandbox(isolation):
    async with await make(isolation, limits=Limits(wall_time_s=1.0)) as sb:
        result = await sb.exec("sleep 300", timeout_s=600)
        assert result.killed_reason == "wall_time" and result.timed_out and result.duration_s < 250  # not 300
        after = await sb.exec("echo hi", timeout_s=60)
        assert after.killed_reason == "wall_time" and after.stdout == b""


async def test_files_in_and_out(isolation):
    async with await make(isolation, files={"seed/a.txt": b"seeded"}) as sb:
        assert await sb.get_file("seed/a.txt") == b"seeded"
        await sb.put_file("bin/run.sh", b"#!/bin/sh\necho ran > out.txt\n", mode=0o755)
        assert (await sb.exec("./bin/run.sh", timeout_s=60)).ok
        assert await sb.get_file("out.txt") == b"ran\n"
        assert await sb.get_file(f"{sb.workspace}/out.txt") == b"ran\n"
        with pytest.raises(FileNotFoundError):
            await sb.get_file("missing.txt")


async def test_workspaces_are_private_and_removed(isolation):
    async with await make(isolation, files={"secret.txt": b"first"}) as first:
        first_dir = first.dir
        assert first_dir.stat().st_mode & 0o777 == 0o700  # no other host user can look in
        async with await make(isolation) as second:
            assert second.dir != first_dir
            look = await second.exec(f"cat secret.txt || cat {first_dir}/workspace/secret.txt", timeout_s=60)
            if isolation == "bwrap":
                assert look.exit_code != 0 and b"first" not in look.stdout
            else:  # unisolated: only the workspaces differ
                assert b"first" in look.stdout and (await second.exec("ls", timeout_s=60)).stdout == b""
    assert not first_dir.exists()


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed (apt-get install -y bubblewrap)")
async def test_bwrap_file_access_does_not_follow_symlinks_out(tmp_path):
    outside = tmp_path / "host.txt"
    outside.write_text("host only")
    async with await make("bwrap") as sb:
        made = await sb.exec(f"ln -s {outside} link.txt && ln -s {tmp_path} linkdir", timeout_s=60)
        assert made.ok, made.text()
        with pytest.raises(FileNotFoundError):  # read from inside, where the target does not exist
            await sb.get_file("link.txt")
        with pytest.raises(SandboxError, match="read-only"):
            await sb.put_file("linkdir/planted.txt", b"x")
    assert not (tmp_path / "planted.txt").exists() and outside.read_text() == "host only"


FORK_40 = """
import subprocess
children = []
for _ in range(40):
    try:
        children.append(subprocess.Popen(["sleep", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    except OSError:
        break
print(len(children))
"""


async def test_process_limit_holds(isolation):
    async with await make(isolation, limits=Limits(pids=16)) as sb:
        if not sb.limits.enforced.startswith("cgroup"):
            pytest.skip(f"no cgroup could be created here (limits: {sb.limits.enforced})")
        result = await sb.exec(["python3", "-c", FORK_40], timeout_s=60)
        assert result.ok, result.text()
        assert 0 < int(result.stdout) < 16
        if isolation == "bwrap":  # the children die with the exec's pid namespace
            await until(lambda: not sb.limits.pids(), "the forked children to be gone")


async def test_many_sandboxes_at_once(isolation):
    async def one(i: int) -> bytes:
        async with await make(isolation, files={"i.txt": str(i).encode()}) as sb:
            return (await sb.exec("sleep 0.2; cat i.txt", timeout_s=60)).stdout

    assert await asyncio.gather(*(one(i) for i in range(8))) == [str(i).encode() for i in range(8)]


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed (apt-get install -y bubblewrap)")
async def test_bwrap_root_is_read_only_and_private_dirs_writable():
    async with await make("bwrap") as sb:
        assert (await sb.exec("touch /usr/x", timeout_s=60)).exit_code != 0
        assert (await sb.exec("touch /x", timeout_s=60)).exit_code != 0
        wrote = await sb.exec(
            "echo t > /tmp/t && echo h > $HOME/h && mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
            timeout_s=60,
        )
        assert wrote.ok, wrote.text()
        assert await sb.get_file("/logs/verifier/reward.txt") == b"1\n"
        assert await sb.get_file("/tmp/t") == b"t\n"
        with pytest.raises(SandboxError, match="read-only"):
            await sb.put_file("/usr/x", b"no")
        assert (await sb.exec("cat /etc/shadow", timeout_s=60)).stdout == b""


async def test_gateway_url_inside(isolation):
    url = "http://127.0.0.1:8000/r/hrl-abc/v1"
    async with await make(isolation, gateway_url=url) as sb:
        assert sb.gateway_url_inside == url  # bwrap: the same port on the sandbox's own loopback
        assert (await sb.exec("echo $HARNESSRL_GATEWAY_URL", timeout_s=60)).stdout.decode().strip() == url
    assert inside_url("http://gw.example:9000/r/t/v1", 8080) == "http://127.0.0.1:8080/r/t/v1"
    with pytest.raises(SandboxError, match="http"):
        await make(isolation, gateway_url="gateway:8000")


async def _http_server() -> tuple[asyncio.AbstractServer, int]:
    """A one-route HTTP stand-in for the gateway: echoes the request line."""

    async def handle(reader, writer):
        request_line = (await reader.readline()).decode().strip()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        body = f"gateway saw {request_line}".encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_forwarders_round_trip(tmp_path):
    server, port = await _http_server()
    inside = await serve_tcp_to_unix("127.0.0.1", 0, str(tmp_path / "gw.sock"))
    inside_port = inside.sockets[0].getsockname()[1]
    route = Route.for_gateway(f"http://127.0.0.1:{port}/r/tok/v1", inside_port)
    bridge = await HostBridge(str(tmp_path / "gw.sock"), route).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", inside_port)
        writer.write(
            f"GET /r/tok/v1/models HTTP/1.1\r\nhost: 127.0.0.1:{inside_port}\r\nconnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"gateway saw GET /r/tok/v1/models HTTP/1.1")
    finally:
        inside.close()
        await bridge.close()
        server.close()
    assert not (tmp_path / "gw.sock").exists()


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap not installed (apt-get install -y bubblewrap)")
async def test_bwrap_reaches_the_gateway_through_the_socket():
    server, port = await _http_server()
    try:
        async with await make("bwrap", gateway_url=f"http://127.0.0.1:{port}/r/tok/v1") as sb:
            code = (
                "import os, urllib.request; "
                "print(urllib.request.urlopen(os.environ['HARNESSRL_GATEWAY_URL'] + '/models').read().decode())"
            )
            result = await sb.exec(["python3", "-c", code], timeout_s=60)
            assert result.ok, result.text()
            assert "gateway saw GET /r/tok/v1/models" in result.stdout.decode()
    finally:
        server.close()


async def test_unknown_kind_and_missing_bwrap_name_the_fix(monkeypatch):
    with pytest.raises(SandboxError, match="local, docker, harbor:<type>"):
        await create_sandbox("vm", SandboxSpec())
    monkeypatch.setattr("sandboxes.bwrap.shutil.which", lambda name: None)
    with pytest.raises(SandboxError, match="apt-get install -y bubblewrap"):
        await create_sandbox("local", SandboxSpec(), isolation="bwrap")


async def test_without_bubblewrap_unisolated_runs_only_when_asked_for(monkeypatch, caplog):
    monkeypatch.setattr("sandboxes.bwrap.bwrap_path", lambda: None)
    for isolation in ("auto", "bwrap"):  # never a silent fallback
        with pytest.raises(SandboxError, match=r"apt-get install -y bubblewrap.*--allow-unisolated"):
            await create_sandbox("local", SandboxSpec(), isolation=isolation)
    async with await create_sandbox("local", SandboxSpec(), allow_unisolated=True) as sb:
        assert sb.isolation == "subprocess" and os.path.isdir(sb.workspace)
    assert "UNISOLATED" in caplog.text and "trusted agents only" in caplog.text


def test_run_without_bubblewrap_is_a_cli_error_naming_both_fixes(monkeypatch):
    from typer.testing import CliRunner

    from harnesses.task import builtin_tasks_path
    from harnessrl.cli.app import app

    monkeypatch.setattr("sandboxes.bwrap.bwrap_path", lambda: None)
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--tasks",
            str(builtin_tasks_path()),
            "--run",
            "r",
            "--admin-key",
            "k",
            "--gateway",
            "http://127.0.0.1:9",
        ],
    )
    assert result.exit_code != 0
    assert "apt-get install -y bubblewrap" in result.output and "--allow-unisolated" in result.output


async def test_unisolated_sandboxes_get_a_minimal_environment_and_their_own_verifier_dirs(monkeypatch):
    monkeypatch.setenv("HARNESSRL_ADMIN_KEY", "parent-secret")
    async with await make("subprocess") as first, await make("subprocess") as second:
        env = await first.exec("env", timeout_s=60)
        assert b"parent-secret" not in env.stdout and b"HARNESSRL_ADMIN_KEY" not in env.stdout
        for sb, name in ((first, b"first"), (second, b"second")):
            wrote = await sb.exec(
                f"mkdir -p /logs/verifier && echo {name.decode()} > /logs/verifier/who && "
                f"echo {name.decode()} > /tests/who",
                timeout_s=60,
            )
            assert wrote.ok, wrote.text()
        for sb, name in ((first, b"first"), (second, b"second")):
            assert (
                await sb.exec("cat /logs/verifier/who /tests/who", timeout_s=60)
            ).stdout == name + b"\n" + name + b"\n"
            assert await sb.get_file("/tests/who") == name + b"\n"
        await first.put_file("/tests/check.sh", b"uploaded")
        assert (await first.exec("cat /tests/check.sh", timeout_s=60)).stdout == b"uploaded"
        assert (await second.exec("ls /tests", timeout_s=60)).stdout == b"who\n"
    assert not os.path.exists("/tests/who") and not os.path.exists("/logs/verifier/who")  # the host's


@pytest.mark.parametrize("key", ["../escape.txt", "/etc/escape.txt", "a/../../escape.txt", ".."])
async def test_seeded_files_stay_in_the_workspace(isolation, key):
    with pytest.raises(SandboxError, match="stay inside"):
        await make(isolation, files={key: b"x"})


PLANT = (
    "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo fake > /tests/test.sh && "
    "ln -s /workspace /tests/linked && "
    "(setsid sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
    ">/dev/null 2>&1 &)"
)


async def test_fresh_dirs_remove_what_the_agent_left_and_stop_its_processes(isolation):
    async with await make(isolation, files={"keep.txt": b"mine"}) as sb:
        planted = await sb.exec(PLANT, timeout_s=60)
        assert planted.ok, planted.text()
        await sb.fresh_dirs("/tests", "/logs/verifier")
        await asyncio.sleep(0.5)  # a writer left behind would have written again by now
        listed = await sb.exec("ls -A /tests /logs/verifier", timeout_s=60)
        assert listed.ok and listed.stdout == b"/logs/verifier:\n\n/tests:\n", listed.text()
        assert (await sb.exec("cat keep.txt", timeout_s=60)).stdout == b"mine"  # the workspace is kept
        with pytest.raises(SandboxError, match="writable dirs"):
            await sb.fresh_dirs("/workspace")
