"""When vLLM dies, the lines of its log that say why, not the last 30 lines of shutdown noise."""

from __future__ import annotations

from harnessrl.engine.process import ManagedProcess, explaining_lines

CORE = "(EngineCore_DP0 pid=4567) ERROR 12-03 08:00:05 [core.py:708] "
CAUSE = (
    "ValueError: To serve at least one request with the models's max seq len (131072), (2.25 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (1.0 GiB)."
)
DEATH = [
    "INFO 12-03 08:00:01 [api_server.py:1880] vLLM API server version 0.32.0",
    "INFO 12-03 08:00:02 [model.py:547] Resolved architecture: Qwen2ForCausalLM",
    f"{CORE}EngineCore failed to start.",
    f"{CORE}Traceback (most recent call last):",
    f'{CORE}  File "/venv/vllm/v1/engine/core.py", line 699, in run_engine_core',
    f"{CORE}    engine_core = EngineCoreProc(*args, **kwargs)",
    f"{CORE}{CAUSE}",
    "(EngineCore_DP0 pid=4567) Process EngineCore_DP0:",
    "(EngineCore_DP0 pid=4567) Traceback (most recent call last):",
    '(EngineCore_DP0 pid=4567)   File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap',
    f"(EngineCore_DP0 pid=4567) {CAUSE}",
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    *[
        f"/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: leaked object {n}"
        for n in range(40)
    ],
]


def test_the_cause_and_the_errors_are_found_once_without_frames_or_noise():
    assert explaining_lines("\n".join(DEATH)) == [
        f"{CORE}EngineCore failed to start.",
        f"{CORE}{CAUSE}",  # once, though the engine core's process prints it again
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]


def test_an_oom_kill_and_a_plain_exit_are_explained():
    log = "INFO 12-03 08:00:01 [x.py:1] loading\nKilled\nout of memory: killed process 12 (python)"
    assert explaining_lines(log) == ["Killed", "out of memory: killed process 12 (python)"]


def test_info_lines_that_mention_errors_explain_nothing():
    assert explaining_lines("INFO 12-03 08:00:01 [x.py:1] error_rate 0, no error seen") == []


def test_a_failed_engine_names_the_cause_then_the_last_lines(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("\n".join(DEATH) + "\n")
    message = str(ManagedProcess(["true"], "http://127.0.0.1:1", log).failure("the engine exited with code 1"))
    assert message.startswith(f"the engine exited with code 1; the lines of {log} that explain it:\n")
    assert CAUSE in message and "leaked object 39" in message and "leaked object 30" not in message


def test_a_log_with_nothing_explaining_falls_back_to_its_last_lines(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("".join(f"INFO 12-03 08:00:01 [x.py:1] line {n}\n" for n in range(50)))
    message = str(ManagedProcess(["true"], "http://127.0.0.1:1", log).failure("gone"))
    assert f"last lines of {log}" in message and "line 49" in message and "line 19" not in message
