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

The learner's half (the folder, its digest, the probe: ``prepare``) runs in a worker thread, as a
checkpoint does, so the event loop stays served; each phase's seconds are in ``Published.metrics``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from contracts.adapter_proof import AdapterProbe, adapter_digest
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

__all__ = [
    "PHASE_METRICS",
    "GatewayUnreachable",
    "PublishError",
    "Prepared",
    "Published",
    "Publisher",
    "prepare",
    "publication_metrics",
]


# a step's metrics of its publication's phases (``Published.metrics``); None where it published nothing
PHASE_METRICS = (
    "publish_write_s",
    "publish_digest_s",
    "publish_probe_s",
    "publish_gateway_s",
    "publish_engine_load_s",
)


def publication_metrics(published: Published | None) -> dict[str, float | None]:
    """The step's ``PHASE_METRICS``: its publication's (``Published.metrics``), or None each."""
    return published.metrics() if published is not None else dict.fromkeys(PHASE_METRICS)


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
    write_s: float = 0.0  # save_s's parts: writing (or linking) the folder, its digest, the probe
    digest_s: float = 0.0
    probe_s: float = 0.0

    def metrics(self) -> dict[str, float | None]:
        """The publication's phases, for the step's metrics: the learner's three, then the gateway's
        (its answer, which loads the adapter and proves it on every engine) and the engine's load in it."""
        phases = (self.write_s, self.digest_s, self.probe_s, self.swap_s - self.save_s, self.engine_load_s)
        return dict(zip(PHASE_METRICS, phases, strict=True))


@dataclass(frozen=True)
class Prepared:
    """The learner's half of a publication: the adapter folder, its digest and probe, and their seconds."""

    path: Path
    digest: str
    probe: AdapterProbe
    write_s: float
    digest_s: float
    probe_s: float

    @property
    def save_s(self) -> float:
        return self.write_s + self.digest_s + self.probe_s


def prepare(model: Any, folder: Path, probe_ids: tuple[int, ...] | None = None) -> Prepared:
    """Write ``model``'s active adapter at ``folder`` (atomically; the weights linked from its checkpoint
    when unchanged, ``learner.adapters``), its digest, and its probe on ``probe_ids``."""
    started = time.perf_counter()
    path = atomic_write_dir(folder, lambda tmp: save_adapter(model, tmp))
    written = time.perf_counter()
    digest = adapter_digest(path)
    digested = time.perf_counter()
    probe = adapter_probe(model, probe_ids or fallback_probe_ids(model.config.vocab_size))
    probed = time.perf_counter()
    return Prepared(path, digest, probe, written - started, digested - written, probed - digested)


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
        started = time.perf_counter()
        ready = await asyncio.to_thread(prepare, model, self.folder(version), probe_ids)
        return await self.send(ready, version, started)

    def folder(self, version: int) -> Path:
        """Where <policy>-v{version} is saved for the engine to load."""
        return self.adapters_dir / adapter_name(self.policy, version)

    async def send(self, ready: Prepared, version: int, started: float) -> Published:
        """Ask the gateway to load and prove a prepared version (its folder and probe are fixed: the model
        may train on meanwhile). ``started``: when its preparation began, where swap_s counts from."""
        name = adapter_name(self.policy, version)
        body = {
            "policy": self.policy,
            "version": version,
            "path": str(ready.path),
            "digest": ready.digest,
            "probe": ready.probe.as_json(),
        }
        attempts, response = await self._send_counted("POST", "/admin/adapters", body)
        swap_s = time.perf_counter() - started
        load_s, proof = None, ()
        # a 409 for a version the gateway serves: an earlier attempt landed, its answer lost to a timeout
        if not (response.status_code == 409 and await self._serves(version, name)):
            _raise_for(response, version, self.policy)
            answer = response.json()
            load_s, proof = answer.get("load_s"), tuple(answer.get("proof") or ())
        return Published(
            version, name, str(ready.path), ready.save_s, swap_s, load_s, attempts, ready.digest, proof,
            ready.write_s, ready.digest_s, ready.probe_s,
        )  # fmt: skip

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
