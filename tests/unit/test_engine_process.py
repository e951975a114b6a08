"""Managed engine processes: healthy start, a dying engine reported with its log, clean stop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harnessrl.engine.process import EngineFailed, EngineLaunch, ManagedProcess, vllm_command
from harnessrl.server import free_port


def test_vllm_command_turns_on_lora_tool_parser_and_processed_logprobs(tmp_path: Path):
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    command = vllm_command(EngineLaunch(model_dir=tmp_path, port=9000))
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enable-lora", "--enable-auto-tool-choice", "--chat-template"):
        assert flag in command
    assert command[command.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert command[command.index("--tool-call-parser") + 1] == "hermes"


@pytest.mark.parametrize("gpu", [True, False])
def test_the_engines_share_of_gpu_memory_is_passed_on_gpus_only(tmp_path: Path, monkeypatch, gpu):
    import harnessrl.engine.process as engine_process

    monkeypatch.setattr(engine_process, "has_gpu", lambda: gpu)
    command = vllm_command(EngineLaunch(model_dir=tmp_path, port=9000, dtype="bfloat16", gpu_memory_utilization=0.5))
    assert (
        (command[command.index("--gpu-memory-utilization") + 1] == "0.5")
        if gpu
        else ("--gpu-memory-utilization" not in command)
    )
    assert "--gpu-memory-utilization" not in vllm_command(EngineLaunch(model_dir=tmp_path, port=9000, dtype="bfloat16"))


def test_missing_model_folder_names_the_prepare_command(tmp_path: Path):
    with pytest.raises(EngineFailed, match="harnessrl models prepare"):
        ManagedProcess.vllm(EngineLaunch(model_dir=tmp_path / "nope"), tmp_path / "log")


def test_engine_that_dies_is_reported_with_its_last_log_lines(tmp_path: Path):
    script = "import sys; print('loading weights'); print('CUDA out of memory: boom'); sys.exit(3)"
    process = ManagedProcess([sys.executable, "-c", script], f"http://127.0.0.1:{free_port()}", tmp_path / "e.log")
    with pytest.raises(EngineFailed, match="(?s)code 3.*boom"):
        process.start().wait_healthy(timeout_s=30)


def test_healthy_engine_starts_and_stops(tmp_path: Path):
    port = free_port()
    process = ManagedProcess(
        [sys.executable, "-m", "tests.fake_engine", "--port", str(port)],
        f"http://127.0.0.1:{port}",
        tmp_path / "e.log",
    )
    with process:
        process.wait_healthy(timeout_s=60)
        assert process.alive()
    assert not process.alive()


def test_a_managed_engine_defaults_to_the_models_own_maximum_context(tmp_path):
    import json

    from harnessrl.engine.process import FALLBACK_MAX_MODEL_LEN, model_max_len

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    assert model_max_len(tmp_path) == 8192
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 32768}}))
    assert model_max_len(tmp_path) == 32768
    (tmp_path / "config.json").write_text("{}")
    assert model_max_len(tmp_path) == FALLBACK_MAX_MODEL_LEN


def test_serving_a_folder_that_is_no_model_names_the_fix(tmp_path, sqlite_db, monkeypatch):
    from typer.testing import CliRunner

    from harnessrl.cli.app import app

    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path), "--database-url", sqlite_db])
    assert result.exit_code == 1 and "harnessrl models prepare" in result.output
