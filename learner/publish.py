"""Publishing a policy version: save the adapter as ``<policy>-v{N}``, ask the gateway to load it.

The gateway (``POST /admin/adapters {"policy", "version", "path"}``, header ``x-admin-key``) loads the
folder into every engine under the new name, makes it current for the policy's new rollouts and
unloads the policy's versions older than ``max_staleness + 1``; other policies are untouched. The
folder must be readable by the engine at that path: the adapters dir is absolute and on a disk the
engine shares.

Transport errors and 503 answers are retried with doubling delays up to ``retries`` times
(``contracts.gateway_client``, the one control-plane transport); any other HTTP error answer is a
configuration problem and is raised with the fix.
A retried request may already have been applied (a timeout after the gateway loaded it): the
gateway then answers 409 and the learner checks ``GET /admin/policy`` before calling it an error.

Each publication carries the adapter's digest and a probe (``learner.adapter_probe``): the gateway
checks that every engine computes with the adapter before it serves it (``contracts.adapter_proof``);
an engine that does not fails the publication with a 502 that names the fix. The request and its answer
are ``contracts.publication``'s wire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from contracts.adapter_proof import adapter_digest
from contracts.gateway_client import Backoff, GatewayUnreachable, send
from learner.adapter_probe import adapter_probe, fallback_probe_ids
from learner.adapters import save_adapter
from learner.checkpoint import atomic_write_dir
from learner.config import PublishSettings
from store.policies import DEFAULT_POLICY, adapter_name

MAX_DELAY_S = 10.0
UNREACHABLE_HINT = (
    "start it with `harnessrl serve`, fix gateway_url in the learner config, "
    "or set publish = false to train without publishing"
)

__all__ = ["GatewayUnreachable", "PublishError", "Published", "Publisher"]


class PublishError(RuntimeError):
    """The gateway refused the adapter; the message says what to fix. (Transport errors that outlast
    the retries are ``GatewayUnreachable``: nothing is wrong with the adapter or the config.)"""


@dataclass(frozen=True)
class Published:
    version: int
    name: str  # the engine's adapter name, <policy>-v{N}
    path: str  # the adapter folder the engine loaded
    save_s: float  # writing the adapter folder
    swap_s: float  # save start -> the gateway's answer (the adapter is then current)
    engine_load_s: float | None  # the engine's own load time, as the gateway reports it
    attempts: int
    digest: str = ""  # sha256 of the adapter's config and weights (contracts.adapter_proof)
    proof: tuple[dict, ...] = ()  # each engine's answer to the probe, as the gateway reports it


class Publisher:
    def __init__(
        self,
        gateway_url: str,
        admin_key: str,
        adapters_dir: Path,
        retries: int = 5,
        timeout_s: float = 120.0,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        policy: str = DEFAULT_POLICY,
    ):
        """``client``: an existing client (tests pass the in-process gateway's); else one is made.
        ``policy``: the policy its versions belong to (the learner sets its run's before publishing)."""
        self.url = gateway_url.rstrip("/")
        self.policy = policy
        self.headers = {"x-admin-key": admin_key} if admin_key else {}
        self.adapters_dir = Path(adapters_dir)
        self.retries = retries
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(timeout=timeout_s)
        self._sleep = sleep

    @classmethod
    def of(cls, settings: PublishSettings) -> Publisher:
        """The publisher a learner's ``[publish]`` settings describe (its own client)."""
        s = settings
        return cls(s.gateway_url, s.admin_key, Path(s.adapters_dir), s.retries, s.timeout_s)

    async def close(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def current_version(self) -> int:
        """The version the gateway serves to the policy's new rollouts (0: the base model, or a policy it
        does not know yet)."""
        response = await self._send("GET", "/admin/policy", params={"policy": self.policy})
        if response.status_code == 404:
            return 0
        _raise_for(response, 0, self.policy)
        return int(response.json()["current_version"])

    async def max_model_len(self) -> int | None:
        """The engine's max model length as the gateway reports it (None: the engine did not say)."""
        value = await self._policy_field("max_model_len")
        return int(value) if value else None

    async def max_staleness(self) -> int | None:
        """Versions the gateway keeps loaded behind the current one (`serve --max-staleness`); None: an
        older gateway that does not say."""
        value = await self._policy_field("max_staleness")
        return None if value is None else int(value)

    async def _policy_field(self, name: str):
        response = await self._send("GET", "/admin/policy")
        if response.status_code == 401:
            _raise_for(response, 0)  # names the admin-key fix
        return response.json().get(name) if response.status_code == 200 else None

    async def publish(self, model: Any, version: int, probe_ids: tuple[int, ...] | None = None) -> Published:
        """Save ``model`` (a peft model) as <policy>-v{version} and make the gateway serve it, proven on
        ``probe_ids`` (default: ``learner.adapter_probe.fallback_probe_ids``)."""
        name = adapter_name(self.policy, version)
        started = time.perf_counter()
        path = atomic_write_dir(self.adapters_dir / name, lambda tmp: save_adapter(model, tmp))
        digest = adapter_digest(path)
        probe = adapter_probe(model, probe_ids or fallback_probe_ids(model.config.vocab_size))
        save_s = time.perf_counter() - started
        body = {
            "policy": self.policy,
            "version": version,
            "path": str(path),
            "digest": digest,
            "probe": probe.as_json(),
        }
        attempts, response = await self._send_counted("POST", "/admin/adapters", body)
        swap_s = time.perf_counter() - started
        if response.status_code == 409 and await self._serves(version, name):
            # an earlier attempt landed (its answer was lost to a timeout): the version is served
            return Published(version, name, str(path), save_s, swap_s, None, attempts, digest)
        _raise_for(response, version, self.policy)
        answer = response.json()
        proof = tuple(answer.get("proof") or ())
        return Published(version, name, str(path), save_s, swap_s, answer.get("load_s"), attempts, digest, proof)

    async def _serves(self, version: int, name: str) -> bool:
        """Whether ``name`` is the gateway's current version (published by us, answer lost)."""
        response = await self._send("GET", "/admin/policy", params={"policy": self.policy})
        if response.status_code != 200:
            return False
        view = response.json()
        return view.get("current_version") == version and name in view.get("loaded", {}).values()

    async def _send(
        self, method: str, path: str, body: dict | None = None, params: dict | None = None
    ) -> httpx.Response:
        return (await self._send_counted(method, path, body, params))[1]

    async def _send_counted(
        self, method: str, path: str, body: dict | None, params: dict | None = None
    ) -> tuple[int, httpx.Response]:
        return await send(
            self.client,
            method,
            self.url + path,
            Backoff(self.retries, 0.5, 2.0, MAX_DELAY_S),
            UNREACHABLE_HINT,
            sleep=self._sleep,
            json=body,
            params=params,
            headers=self.headers,
        )


def _raise_for(response: httpx.Response, version: int, policy: str = DEFAULT_POLICY) -> None:
    if response.status_code < 400:
        return
    message = _error_message(response)
    label = adapter_name(policy, version)
    if response.status_code == 401:
        raise PublishError(
            f"the gateway refused the admin key ({message}): set admin_key in the learner config, "
            f"--admin-key or HARNESSRL_ADMIN_KEY to the gateway's key (`harnessrl serve` keeps it in "
            f"$HARNESSRL_HOME/admin.key, which `harnessrl train` reads by default)"
        )
    if response.status_code == 409:
        raise PublishError(
            f"the gateway refused {label} ({message}): it already serves a newer version of policy {policy!r}, "
            f"so another learner publishes that policy or this run's checkpoints were reset; give each "
            f"learner a run of its own policy (`harnessrl run --policy NAME`)"
        )
    raise PublishError(f"publishing {label} failed with HTTP {response.status_code}: {message}")


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except Exception:  # noqa: BLE001 - any non-standard body: show its start
        return response.text[:300]
