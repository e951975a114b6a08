"""Gateway URLs seen from the host and from inside a sandbox.

Inside, the gateway is always the forwarder on loopback: `http://GW:PORT/r/tok/v1` becomes
`http://127.0.0.1:PORT/r/tok/v1` (same port unless `gateway_port_inside` says otherwise), so the agent's
base URL keeps its path, and its token with it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

from sandboxes.protocol import SandboxError

DEFAULT_PORTS = {"http": 80, "https": 443}


def gateway_target(url: str) -> tuple[str, int]:
    """(host, port) the host end of the bridge connects to."""
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise SandboxError(
            f"gateway URL {url!r} is not http(s)://HOST[:PORT][/path]: "
            "pass the gateway's base URL, e.g. http://127.0.0.1:8000/r/<token>/v1"
        )
    return parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme]


def inside_url(url: str, port_inside: int | None = None) -> str:
    """The same URL with its authority replaced by the in-sandbox forwarder's 127.0.0.1:PORT."""
    parts = urlsplit(url)
    _, port = gateway_target(url)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{port_inside or port}"))


def reachable_from_elsewhere(host: str) -> bool:
    """False for a loopback or unspecified address (127.0.0.1, ::1, ::ffff:127.0.0.1, 0.0.0.0) or a
    localhost name: what means "this machine" to whoever uses it."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return False
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return True  # a name: resolved where the sandbox is
    mapped = getattr(address, "ipv4_mapped", None) or address
    return not (mapped.is_loopback or mapped.is_unspecified)


def public_url(url: str, kind: str) -> str:
    """``url`` as given to a sandbox without a bridge (harbor:<type>), which runs in a network of its
    own and never reaches this machine's loopback: SandboxError naming the fix for a loopback URL."""
    host, _ = gateway_target(url)
    if not reachable_from_elsewhere(host):
        raise SandboxError(
            f"--sandbox {kind} sandboxes reach the gateway at its public URL, and it names itself {url} "
            "(loopback, which they cannot reach): start it with `harnessrl serve --public-url URL` (an "
            "address the sandboxes reach), or pass `run --sandbox-gateway URL`"
        )
    return url
