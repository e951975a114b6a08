"""Where a task's verifier runs: the task's setting, and the fresh sandbox's spec."""

from __future__ import annotations

import pytest

from harnesses.environments import Environments
from harnesses.task import Task, TaskError, load_harbor
from sandboxes import SandboxSpec
from sandboxes.protocol import verifier_env


def harbor_folder(tmp_path, verifier_table: str):
    tmp_path.mkdir()
    (tmp_path / "instruction.md").write_text("Do it.\n")
    (tmp_path / "task.toml").write_text(f'version = "1.0"\n[verifier]\n{verifier_table}\n')
    return tmp_path


def test_a_task_grades_in_a_fresh_sandbox_unless_its_task_toml_opts_out(tmp_path):
    assert load_harbor(harbor_folder(tmp_path / "a", "")).grade_in == "fresh_sandbox"
    opted = load_harbor(harbor_folder(tmp_path / "b", 'grade_in = "agent_sandbox"'))
    assert opted.grade_in == "agent_sandbox"
    with pytest.raises(TaskError, match="grade_in.*fresh_sandbox.*agent_sandbox"):
        load_harbor(harbor_folder(tmp_path / "c", 'grade_in = "host"'))


async def test_the_fresh_sandbox_has_no_route_files_or_agent_install_of_the_agents():
    agent = SandboxSpec(
        gateway_url="http://127.0.0.1:1/r/t/v1",
        files={"a.txt": b"x"},
        ro_binds=("/opt/agent",),
        env={"TASK": "1"},
        name="t-0",
    )
    task = Task(name="t", instruction="i", verifier="true")
    fresh = await Environments().grading_spec(task, "local", agent)
    assert (fresh.gateway_url, fresh.files, fresh.ro_binds, fresh.env) == (None, {}, (), {"TASK": "1"})
    assert fresh.workspace == agent.workspace and fresh.name == "t-0-grade"


async def test_no_fresh_sandbox_for_a_task_that_opts_out_or_a_workspace_of_root():
    opted = Task(name="t", instruction="i", verifier="true", grade_in="agent_sandbox")
    plain = Task(name="t", instruction="i", verifier="true")
    assert await Environments().grading_spec(opted, "local", SandboxSpec()) is None
    assert await Environments().grading_spec(plain, "docker", SandboxSpec(image="x", workdir="/")) is None


def test_the_verifier_environment_keeps_the_tasks_variables_and_drops_loader_variables():
    declared = {"TASK": "1", "PATH": "/opt/task/bin:/usr/bin", "LD_PRELOAD": "/x.so", "BASH_ENV": "/x", "HOME": "/a"}
    env = verifier_env(declared, "/fresh", "/app", "/run/harnessrl/verifier-python")
    assert env == {
        "TASK": "1",
        "PATH": "/opt/task/bin:/usr/bin",  # the task image's own PATH
        "LANG": "C.UTF-8",
        "HOME": "/fresh",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPATH": "/run/harnessrl/verifier-python",  # our sitecustomize.py alone (verifier_site.py)
        "HARNESSRL_WORKSPACE": "/app",
    }
