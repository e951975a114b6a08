"""The inside end of a network-less sandbox's one route out: a byte forwarder to the gateway socket.

    agent --TCP--> 127.0.0.1:PORT (inside) --tcp-to-unix--> gateway.sock (bind-mounted)
          --> sandboxes.bridge.HostBridge (host, HTTP-aware) --> gateway host:port

Inside the sandbox there is no network (`--network none` / `--unshare-net`), only loopback, so the
agent keeps a plain `http://127.0.0.1:PORT/r/<token>/v1` base URL. This end only copies bytes: it runs
where the agent can replace it or talk to the socket itself, so every check lives in the host end.

This file is copied into sandboxes and run by their python3 as a script: standard library only,
no imports of ours.

    python -m sandboxes.forwarder tcp-to-unix --listen 127.0.0.1:8000 --socket S [--loopback-up] [-- CMD ARGS...]

``--loopback-up`` first brings up the loopback interface of a network namespace just made with
``unshare --net`` (bubblewrap does that itself for the namespaces it makes): the local backend runs
the forwarder so, outside a sandbox whose root (a task's image) may have no python3.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import signal
import socket
import struct
import sys

CHUNK = 64 * 1024
READY_LINE = "harnessrl-forwarder ready"  # printed once listening, for whoever waits on our logs
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40


def loopback_up() -> None:
    """`ip link set lo up` in this network namespace (needs CAP_NET_ADMIN there), standard library only."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close so HTTP keep-alive and streaming replies behave."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _splice(client: tuple[asyncio.StreamReader, asyncio.StreamWriter], connect) -> None:
    """Join one accepted connection to a fresh upstream connection, both directions."""
    c_reader, c_writer = client
    try:
        u_reader, u_writer = await connect()
    except OSError:
        c_writer.close()  # upstream down: the client sees a closed connection, as with a dead server
        return
    try:
        await asyncio.gather(_pipe(c_reader, u_writer), _pipe(u_reader, c_writer))
    finally:
        for w in (c_writer, u_writer):
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()


async def serve_tcp_to_unix(host: str, port: int, socket_path: str) -> asyncio.AbstractServer:
    """Inside end: accept TCP on host:port, forward each connection to the unix socket."""
    return await asyncio.start_server(
        lambda r, w: _splice((r, w), lambda: asyncio.open_unix_connection(socket_path)), host, port
    )


async def _run_child(argv: list[str]) -> int:
    """Run argv with our stdio; its exit status, as a shell reports it (128 + signal)."""
    proc = await asyncio.create_subprocess_exec(*argv)
    for sig in (signal.SIGTERM, signal.SIGINT):  # pass polite stops on to the command
        asyncio.get_running_loop().add_signal_handler(sig, proc.send_signal, sig)
    code = await proc.wait()
    return 128 - code if code < 0 else code


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def _main(args: argparse.Namespace) -> int:
    host, port = args.listen
    if args.loopback_up:
        loopback_up()
    async with await serve_tcp_to_unix(host, port, args.socket):
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if command:
            return await _run_child(command)
        print(READY_LINE, flush=True)
        await asyncio.Event().wait()  # serve until killed
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="forwarder", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    inside = sub.add_parser("tcp-to-unix", help="inside a sandbox: TCP listener -> unix socket")
    inside.add_argument("--listen", type=_host_port, required=True, help="HOST:PORT to listen on")
    inside.add_argument("--socket", required=True, help="unix socket leading to the gateway")
    inside.add_argument("--loopback-up", action="store_true", help="bring up lo first (a fresh network namespace)")
    inside.add_argument(
        "command", nargs=argparse.REMAINDER, help="optional: run this command while forwarding, exit with its status"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        return asyncio.run(_main(parse_args(argv)))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
