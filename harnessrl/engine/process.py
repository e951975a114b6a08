"""Managed subprocesses: vLLM started with the flags harnessrl needs (and the learner quickstart starts),
watched, stopped."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from harnessrl.engine.hardware import (
    available_memory_bytes,
    batched_tokens,
    has_gpu,
    kv_cache_gib,
    machine_dtype,
)


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it when the gateway dies, even by kill -9."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: stop() still covers orderly shutdowns
        pass


# Lines that say why a process died: logged errors, exception lines, the kernel's OOM kill. vLLM prefixes
# its engine core's lines with "(EngineCore_DP0 pid=N)" and its log lines with "LEVEL date time [file:line]";
# the rest of a dying server's log is shutdown noise.
_PREFIX = re.compile(r"^(\(\S+ pid=\d+\) ?)?((?P<level>[A-Z]+) \S+ \S+ \[[^\]]*\] )?")
_EXCEPTION = re.compile(r"^([\w.]+(Error|Exception|Exit)|Killed)\b(:|$)|(?i:out of memory)")


def explaining_lines(text: str, limit: int = 20) -> list[str]:
    """The log's lines that say why the process died, each once, in order (the first ``limit``):
    ERROR/CRITICAL messages and exception lines, without the tracebacks' frames and code."""
    seen, found = set(), []
    for line in text.splitlines():
        prefix = _PREFIX.match(line)
        message = line[prefix.end() :]
        if message[:1].isspace() or message.startswith("Traceback (most recent call last)"):
            continue  # a traceback's frames and code: the exception line says it
        logged_error = prefix.group("level") in ("ERROR", "CRITICAL")
        if (logged_error or _EXCEPTION.search(message)) and message.strip() and message not in seen:
            seen.add(message)
            found.append(line.rstrip())
    return found[:limit]


class EngineFailed(RuntimeError):
    """The engine exited or never became healthy; the message carries its last log lines."""


@dataclass(frozen=True)
class EngineLaunch:
    model_dir: Path
    host: str = "127.0.0.1"
    port: int = 8100
    served_name: str = "base"
    max_model_len: int = 4096
    max_lora_rank: int = 16
    max_loras: int = 4  # distinct adapters in one batch (harnessrl.engine.lora_slots sizes it from the policies)
    max_cpu_loras: int | None = None  # adapters vLLM keeps in memory; None: vLLM's default (max_loras)
    kv_cache_gib: int | None = None  # VLLM_CPU_KVCACHE_SPACE; None: from free memory; ignored on GPUs
    dtype: str = field(default_factory=lambda: machine_dtype().dtype)  # the serving dtype, chosen for the machine
    chat_template: Path | None = None  # default: the model folder's chat_template.jinja
    extra_args: tuple[str, ...] = ()
    cpu_cores: str | None = None  # VLLM_CPU_OMP_THREADS_BIND ("0,1"); None: vLLM's own choice (auto)
    # GPUs: the share of the GPU's memory vLLM takes (its default 0.9 leaves a learner on the same GPU
    # too little); None: vLLM's default. Ignored on CPUs.
    gpu_memory_utilization: float | None = None


def vllm_command(launch: EngineLaunch) -> list[str]:
    """The server command line. `python -m` because the `vllm` script fails under vllm-cpu."""
    template = launch.chat_template or launch.model_dir / "chat_template.jinja"
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(launch.model_dir),
        "--served-model-name",
        launch.served_name,
        "--host",
        launch.host,
        "--port",
        str(launch.port),
        "--max-model-len",
        str(launch.max_model_len),
        "--dtype",
        launch.dtype,
        "--enable-lora",
        "--max-lora-rank",
        str(launch.max_lora_rank),
        "--max-loras",
        str(launch.max_loras),
        *(("--max-cpu-loras", str(launch.max_cpu_loras)) if launch.max_cpu_loras else ()),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--logprobs-mode",
        "processed_logprobs",
        # Forced tool calls as compact JSON: random and small models otherwise loop on whitespace.
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
        "--disable-uvicorn-access-log",
    ]
    if template.exists():
        command += ["--chat-template", str(template)]
    gpu = has_gpu()
    batched = batched_tokens(launch.max_model_len, gpu)
    if batched is not None and "--max-num-batched-tokens" not in launch.extra_args:
        command += ["--max-num-batched-tokens", str(batched)]
    if gpu and launch.gpu_memory_utilization is not None:
        command += ["--gpu-memory-utilization", str(launch.gpu_memory_utilization)]
    return command + list(launch.extra_args)


def vllm_env(launch: EngineLaunch) -> dict[str, str]:
    env = dict(os.environ)
    kv_gib = launch.kv_cache_gib if launch.kv_cache_gib is not None else kv_cache_gib(available_memory_bytes())
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_gib))
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # hot-swapping adapters
    if launch.cpu_cores is not None:  # one of several engines on this CPU: its own cores
        env["VLLM_CPU_OMP_THREADS_BIND"] = launch.cpu_cores
    env.setdefault("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "75")  # idle gaps between hot swaps outlive 5 s
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    return env


FALLBACK_MAX_MODEL_LEN = 4096  # a model folder whose config.json names no maximum


def model_max_len(model_dir: Path) -> int:
    """The model's own maximum context (config.json ``max_position_embeddings``; the text config's for a
    multimodal model), or FALLBACK_MAX_MODEL_LEN when it names none."""
    import json

    check_model_dir(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    for section in (config, config.get("text_config") or {}):
        value = section.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return FALLBACK_MAX_MODEL_LEN


def check_model_dir(model_dir: Path) -> None:
    if not (model_dir / "config.json").exists():
        raise EngineFailed(
            f"{model_dir} is not a Hugging Face model folder (no config.json); "
            f"run `harnessrl models prepare` for SmolLM2 or `harnessrl models tiny DIR`"
        )


class ManagedProcess:
    """A subprocess in its own process group (vLLM, a gateway, the learner), logging to ``log_path``;
    a server among them answers ``GET /health`` at ``url`` (``wait_healthy``)."""

    def __init__(self, command: list[str], url: str, log_path: Path, env: dict[str, str] | None = None):
        self.command, self.url, self.log_path, self.env = command, url, log_path, env
        self._proc: subprocess.Popen | None = None

    @classmethod
    def vllm(cls, launch: EngineLaunch, log_path: Path) -> ManagedProcess:
        check_model_dir(launch.model_dir)
        return cls(vllm_command(launch), f"http://{launch.host}:{launch.port}", log_path, vllm_env(launch))

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            # Own process group, so stop() reaches vLLM's engine-core children too.
            self._proc = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                return "".join(deque(log, maxlen=lines))
        except FileNotFoundError:
            return ""

    def failure(self, what: str) -> EngineFailed:
        return EngineFailed(f"{what}; {self.why()}")

    def why(self, last: int = 5) -> str:
        """What its log says went wrong: the explaining lines, then the last few; else the last 30 lines."""
        explaining = explaining_lines(self.tail(2000))
        if not explaining:
            return f"last lines of {self.log_path}:\n{self.tail()}"
        return (
            f"the lines of {self.log_path} that explain it:\n"
            + "\n".join(explaining)
            + f"\n(last lines:)\n{self.tail(last)}"
        )

    def wait_healthy(self, timeout_s: float = 900.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                code = self._proc.returncode if self._proc else None
                raise self.failure(f"the engine exited with code {code} before becoming healthy")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise self.failure(f"the engine did not become healthy within {timeout_s:.0f} s")

    def stop(self, timeout_s: float = 20.0) -> None:
        if not self.alive():
            return
        pgid = os.getpgid(self._proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self._proc.wait()
        try:  # children that outlived the server
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


RESTART_AFTER_S = 30.0  # a managed engine of several that died is started again at most this often


def engine_launches(
    launch: EngineLaunch, count: int, ports: list[int], gpu: bool, cores: list[int] | None = None
) -> list[EngineLaunch]:
    """``serve --engines N``: on GPUs one vLLM with ``--data-parallel-size N`` (vLLM spreads requests over
    its replicas behind one server); on CPUs N servers on ``ports``, each with an N-th of the KV cache
    and, when there are enough, its own share of ``cores`` (VLLM_CPU_OMP_THREADS_BIND)."""
    if count == 1:
        return [launch]
    if gpu:
        return [replace(launch, extra_args=(*launch.extra_args, "--data-parallel-size", str(count)))]
    kv_gib = (
        launch.kv_cache_gib
        if launch.kv_cache_gib is not None
        else max(1, kv_cache_gib(available_memory_bytes()) // count)
    )
    shares = _core_shares(cores or [], count)
    return [replace(launch, port=port, kv_cache_gib=kv_gib, cpu_cores=share) for port, share in zip(ports, shares)]


def _core_shares(cores: list[int], count: int) -> list[str | None]:
    """``count`` disjoint core lists ("0,1") of equal size; all None when there are fewer cores than engines."""
    if len(cores) < count:
        return [None] * count
    size = len(cores) // count
    return [",".join(str(c) for c in cores[i * size : (i + 1) * size]) for i in range(count)]


class EngineGroup:
    """Several managed engines behind one gateway (``serve --engines N`` on CPUs), watched as one.

    ``alive`` is what ``harnessrl.engine.watchdog`` polls: true while any engine runs; an engine that died
    is started again (at most every ``RESTART_AFTER_S``), and the gateway's engine pool brings it back
    with the current adapters once it is healthy. Only when every engine is dead does the gateway stop.
    """

    def __init__(self, engines: list[ManagedProcess], clock=time.monotonic):
        self.engines, self._clock = engines, clock
        self._restarted: dict[int, float] = {}
        self.log_path = engines[0].log_path  # the last one that died, for the watchdog's message

    @property
    def urls(self) -> list[str]:
        return [engine.url for engine in self.engines]

    def start(self, timeout_s: float) -> EngineGroup:
        """Start all and wait until each is healthy (side by side); EngineFailed stops them all."""
        from concurrent.futures import ThreadPoolExecutor

        try:
            for engine in self.engines:
                engine.start()
            with ThreadPoolExecutor(len(self.engines)) as pool:
                list(pool.map(lambda e: e.wait_healthy(timeout_s), self.engines))
        except EngineFailed:
            self.stop()
            raise
        return self

    def alive(self) -> bool:
        dead = [i for i, engine in enumerate(self.engines) if not engine.alive()]
        if len(dead) == len(self.engines):
            self.log_path = self.engines[dead[-1]].log_path
            return False
        for index in dead:
            if self._clock() - self._restarted.get(index, float("-inf")) >= RESTART_AFTER_S:
                self._restarted[index] = self._clock()
                self.log_path = self.engines[index].log_path
                self.engines[index].start()
        return True

    def tail(self, lines: int = 30) -> str:
        return "".join(f"== {engine.log_path}\n{engine.tail(lines)}" for engine in self.engines)

    def why(self) -> str:
        """What the log of the engine that died last says went wrong."""
        return next(engine for engine in self.engines if engine.log_path == self.log_path).why()

    def stop(self) -> None:
        for engine in self.engines:
            engine.stop()
