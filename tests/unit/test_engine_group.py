"""`serve --engines N`: N managed vLLM-CPU processes (own ports, cores and KV-cache shares) or one with
vLLM's --data-parallel-size on GPUs; a dead one of several is started again, all dead stops the gateway."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from harnessrl.engine.process import EngineGroup, EngineLaunch, ManagedProcess, engine_launches, vllm_command, vllm_env


def test_several_cpu_engines_get_their_own_port_cores_and_share_of_the_kv_cache(tmp_path):
    launch = EngineLaunch(model_dir=tmp_path, port=8100, kv_cache_gib=None)
    launches = engine_launches(launch, 2, [8100, 8101], gpu=False, cores=[0, 1, 2, 3])
    assert [one.port for one in launches] == [8100, 8101]
    assert [vllm_env(one)["VLLM_CPU_OMP_THREADS_BIND"] for one in launches] == ["0,1", "2,3"]
    assert launches[0].kv_cache_gib == launches[1].kv_cache_gib >= 1
    assert [vllm_command(one)[vllm_command(one).index("--port") + 1] for one in launches] == ["8100", "8101"]
    fewer_cores = engine_launches(launch, 4, [1, 2, 3, 4], gpu=False, cores=[0, 1])
    assert all(one.cpu_cores is None for one in fewer_cores)  # vLLM's own binding rather than none


def test_on_gpus_several_engines_are_one_vllm_with_data_parallel_replicas(tmp_path):
    launch = EngineLaunch(model_dir=tmp_path, port=8100)
    (one,) = engine_launches(launch, 4, [8100, 8101, 8102, 8103], gpu=True)
    command = vllm_command(one)
    assert command[command.index("--data-parallel-size") + 1] == "4" and one.port == 8100
    assert engine_launches(launch, 1, [8100], gpu=False) == [launch]


def sleeper(tmp_path: Path, name: str) -> ManagedProcess:
    return ManagedProcess(["sleep", "60"], f"http://127.0.0.1/{name}", tmp_path / f"{name}.log")


def test_a_dead_engine_of_several_is_started_again_and_all_dead_means_the_group_is_dead(tmp_path):
    now = [0.0]
    group = EngineGroup([sleeper(tmp_path, "a"), sleeper(tmp_path, "b")], clock=lambda: now[0])
    try:
        for engine in group.engines:
            engine.start()
        first = group.engines[0].pid
        os.kill(first, signal.SIGKILL)
        group.engines[0]._proc.wait()
        assert group.alive()  # the other one serves; the dead one is started again
        assert group.engines[0].alive() and group.engines[0].pid != first
        assert group.log_path == tmp_path / "a.log"
        for engine in group.engines:
            engine.stop()
        assert not group.alive()
    finally:
        group.stop()


def test_a_group_whose_engines_all_died_says_why_from_the_log_of_the_last_one(tmp_path):
    group = EngineGroup([sleeper(tmp_path, "a"), sleeper(tmp_path, "b")])
    (tmp_path / "a.log").write_text("starting\n")
    (tmp_path / "b.log").write_text("starting\nRuntimeError: out of KV cache blocks\n")
    try:
        for engine in group.engines:
            engine.start()
        for engine in group.engines:
            engine.stop()
        assert not group.alive()
        assert str(tmp_path / "b.log") in group.why() and "out of KV cache" in group.why()
    finally:
        group.stop()


def test_serve_starts_one_engine_by_the_same_path_as_several(tmp_path, monkeypatch):
    from rich.console import Console

    from harnessrl.engine import watchdog as engine_watchdog

    started = []
    monkeypatch.setattr(EngineGroup, "start", lambda group, timeout_s: started.append(group.urls) or group)
    (tmp_path / "config.json").write_text("{}")
    launch = EngineLaunch(model_dir=tmp_path, port=8100)
    one = engine_watchdog.start_engines(launch, 1, tmp_path, 5.0, Console(quiet=True))
    assert isinstance(one, EngineGroup) and started == [["http://127.0.0.1:8100"]]
    assert one.engines[0].log_path == tmp_path / "engine-8100.log"
