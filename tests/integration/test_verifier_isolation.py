"""The verifier is out of the agent's reach, in bubblewrap and docker sandboxes.

A link the agent leaves in its working directory to the verifier's expected file under /tests (absolute,
relative, through a chain or a linked folder) is removed before grading and earns nothing, and a link
inside the working directory still works: in Harbor's podman environments too.

A wrong solution plus code planted for the verifier to load (a user-site usercustomize.py or .pth, a
login profile setting BASH_ENV or LD_PRELOAD, a replaced python3 or /etc/ld.so.preload where the agent
is root, a module of the working directory named like one of the standard library's or pytest's, or
packaging metadata there registering a pytest plugin) must get the verifier's true reward, 0: in the
agent's own sandbox (a fresh $HOME and a clean environment) and in the fresh sandbox that holds only
the agent's work (the default). A right solution whose tests import its module from the working
directory still gets 1.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harnesses.environments import Environments
from harnesses.grading.grade import grade
from harnesses.task import load_harbor
from tests.integration.backends import BACKENDS, DOCKER_SKIP, HARBOR_PODMAN, backend_spec, create_backend
from tests.integration.verifier_attacks import (
    ATTACKS,
    HONEST_LINK,
    LINK_ATTACKS,
    OWN_MODULE_VERIFIERS,
    PYTEST_ATTACKS,
    RIGHT_CALC,
    WRONG_CALC,
    attacked_verdict,
    calc_task,
    compare_task,
    graded,
    linked_verdict,
    own_library,
    pytest_verdict,
    sandbox_kind,
    wrong_answer_task,
)

GRADE_IN = ["fresh_sandbox", "agent_sandbox"]
LINK_BACKENDS = [*BACKENDS, HARBOR_PODMAN]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> bytes | None:
    return own_library(tmp_path_factory.mktemp("own"))


@pytest.mark.parametrize("grade_in", GRADE_IN)
@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("backend", BACKENDS)
async def test_code_planted_for_the_verifier_does_not_run_in_it(backend, attack, grade_in, library):
    plant, verifier = ATTACKS[attack]
    if attack == "LD_PRELOAD" and library is None:
        pytest.skip("no C compiler to build the preload library")
    task = wrong_answer_task(verifier, grade_in)
    verdict = await attacked_verdict(backend, backend_spec(backend, files=task.files), task, plant, library)
    assert (verdict.reward, verdict.exit_code) == (0.0, 1), verdict.output


@pytest.mark.parametrize("grade_in", GRADE_IN)
@pytest.mark.parametrize("attack", list(LINK_ATTACKS))
@pytest.mark.parametrize("backend", LINK_BACKENDS)
async def test_a_link_to_the_verifiers_expected_file_earns_nothing(backend, attack, grade_in):
    plant, verifier = LINK_ATTACKS[attack]
    task = compare_task(verifier, grade_in)
    verdict = await linked_verdict(backend, backend_spec(backend, files=task.files), task, plant)
    assert (verdict.reward, verdict.error) == (0.0, None), verdict.output
    assert "answer.txt" in {link.path for link in verdict.refused_links}, verdict.refused_links
    assert verdict.detail()["refused_links"]["count"] == len(verdict.refused_links)


@pytest.mark.parametrize("grade_in", GRADE_IN)
@pytest.mark.parametrize("backend", LINK_BACKENDS)
async def test_a_link_inside_the_workspace_still_scores_one(backend, grade_in):
    task = compare_task("cmp -s answer.txt /tests/expected.txt && test -L answer.txt", grade_in)
    verdict = await linked_verdict(backend, backend_spec(backend, files=task.files), task, HONEST_LINK)
    assert (verdict.reward, verdict.error, verdict.refused_links) == (1.0, None, ()), verdict.output


ENV_PROBE = (
    "import json, os; print(json.dumps({'env': dict(os.environ), 'home': os.listdir(os.environ['HOME']), "
    "'python': os.listdir(os.environ['PYTHONPATH'])}))"
)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_verifier_gets_a_fresh_home_and_only_the_tasks_environment(backend):
    """Loader variables the sandbox's environment carries for the agent, and the agent's home, are not
    the verifier's: it sees the task's variables, a fixed PATH, an empty $HOME, no user site, and a
    PYTHONPATH naming our sitecustomize.py alone, told the working directory."""
    carried = {"BASH_ENV": "/tmp/x", "LD_PRELOAD": "/tmp/x.so", "PYTHONPATH": "/tmp", "NODE_OPTIONS": "-r /x"}
    spec = backend_spec(backend, env={**carried, "TASK_SETTING": "kept"})
    async with await create_backend(backend, spec) as sandbox:
        await sandbox.exec("touch $HOME/agent-was-here", timeout_s=60)
        ran = await sandbox.exec_verifier(["python3", "-c", ENV_PROBE], timeout_s=60, env={"VERIFIER_SETTING": "1"})
    assert ran.ok, ran.text()
    seen = json.loads(ran.stdout)
    env = seen["env"]
    assert seen["home"] == [] and not (set(carried) - {"PYTHONPATH"}) & set(env), env
    assert set(seen["python"]) - {"__pycache__"} == {"sitecustomize.py"}, seen["python"]
    assert env["HARNESSRL_WORKSPACE"] == sandbox.workspace
    assert env["TASK_SETTING"] == "kept" and env["VERIFIER_SETTING"] == "1" and env["PYTHONNOUSERSITE"] == "1"
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert "HARNESSRL_GATEWAY_URL" not in env


@pytest.mark.parametrize("grade_in", GRADE_IN)
@pytest.mark.parametrize("attack", list(PYTEST_ATTACKS))
@pytest.mark.parametrize("backend", BACKENDS)
async def test_modules_planted_in_the_working_directory_do_not_take_over_pytest(tmp_path, backend, attack, grade_in):
    verdict = await pytest_verdict(tmp_path, backend, grade_in, f"{WRONG_CALC} && {PYTEST_ATTACKS[attack]}")
    assert (verdict.reward, verdict.error) == (0.0, None), verdict.output


@pytest.mark.parametrize("grade_in", GRADE_IN)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_pytest_still_imports_the_agents_own_module_from_the_working_directory(tmp_path, backend, grade_in):
    verdict = await pytest_verdict(tmp_path, backend, grade_in, RIGHT_CALC)
    assert (verdict.reward, verdict.error) == (1.0, None), verdict.output


@pytest.mark.parametrize("grade_in", GRADE_IN)
@pytest.mark.parametrize("verifier", list(OWN_MODULE_VERIFIERS))
@pytest.mark.parametrize("backend", BACKENDS)
async def test_python_c_and_m_still_import_the_agents_own_module(backend, verifier, grade_in):
    task = calc_task(OWN_MODULE_VERIFIERS[verifier], grade_in)
    async with await create_backend(backend, backend_spec(backend)) as agent:
        assert (await agent.exec(RIGHT_CALC, timeout_s=60)).ok
        verdict = await graded(backend, agent, task)
    assert (verdict.reward, verdict.error) == (1.0, None), verdict.output


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fresh_sandbox_grades_an_exact_copy_of_the_agents_work(backend):
    task = wrong_answer_task("test ! -e gone.txt && test -L link && python3 /tests/check.py", "fresh_sandbox")
    spec = backend_spec(backend, files={**task.files, "gone.txt": b"x"})
    async with await create_backend(backend, spec) as agent:
        done = await agent.exec("echo 42 > answer.txt && rm gone.txt && ln -s answer.txt link", timeout_s=60)
        assert done.ok, done.text()
        verdict = await graded(backend, agent, task)
    assert (verdict.reward, verdict.error) == (1.0, None), verdict.output


HARBOR_TEST = """#!/bin/bash
if python3 -c 'import sys; sys.exit(0 if open("/app/answer.txt").read().strip() == "42" else 1)'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
# The agent is root in a docker sandbox: it replaces python3 on PATH and preloads its library everywhere.
ROOT_ATTACK = (
    "printf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\nexit 0\\n' "
    "> /usr/local/bin/python3 && chmod +x /usr/local/bin/python3"
)
PRELOAD_EVERYWHERE = "cp own.so /usr/local/lib/own.so && echo /usr/local/lib/own.so > /etc/ld.so.preload"


def harbor_task(folder, grade_in: str | None = None):
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo 0 > /app/answer.txt && echo image > /app/from-image.txt\n"
    )
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text(HARBOR_TEST)
    (folder / "instruction.md").write_text("Write 42 into /app/answer.txt.\n")
    verifier = f'\n[verifier]\ngrade_in = "{grade_in}"\n' if grade_in else ""
    (folder / "task.toml").write_text(f'version = "1.0"\n[metadata]\nname = "harbor-answer"\n{verifier}')
    return load_harbor(folder)


@pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
@pytest.mark.parametrize("answer, expected", [("41", 0.0), ("42", 1.0)])
async def test_a_harbor_task_in_docker_grades_only_the_work_in_its_workdir(tmp_path, library, answer, expected):
    """The default for a Harbor task: its image, fresh, with the agent's WORKDIR copied in. A replaced
    /usr/local/bin/python3 and /etc/ld.so.preload stay in the agent's container."""
    task = harbor_task(tmp_path / "task")
    assert task.grade_in == "fresh_sandbox"
    environments = Environments()
    spec = await environments.sandbox_spec(task, "oracle", "docker", backend_spec("docker", name="harbor-answer"))
    attack = ROOT_ATTACK + (f" && {PRELOAD_EVERYWHERE}" if library is not None else "")
    async with await create_backend("docker", spec) as agent:
        if library is not None:
            await agent.put_file("own.so", library)
        done = await agent.exec(f"echo {answer} > answer.txt && rm from-image.txt && {attack}", timeout_s=60)
        assert done.ok, done.text()
        verdict = await graded("docker", agent, task, environments)
    assert (verdict.reward, verdict.error) == (expected, None), verdict.output


@pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
async def test_a_task_that_opts_out_is_graded_in_the_agents_own_sandbox(tmp_path):
    """grade_in = "agent_sandbox": state the agent left outside WORKDIR (here a file under /etc) is
    what such a verifier needs, and it sees it."""
    task = harbor_task(tmp_path / "task", grade_in="agent_sandbox")
    task = replace(task, tests={"test.sh": b"#!/bin/bash\ntest -e /etc/agent-state\n"}, reward_source="exit_code")
    environments = Environments()
    spec = await environments.sandbox_spec(task, "oracle", "docker", backend_spec("docker", name="harbor-optout"))
    assert await environments.grading_spec(task, "docker", spec) is None
    async with await create_backend("docker", spec) as agent:
        assert (await agent.exec("touch /etc/agent-state", timeout_s=60)).ok
        kind, options = sandbox_kind("docker")
        verdict = await grade(kind, agent, task, None, options)
    assert verdict.reward == 1.0, verdict.output
