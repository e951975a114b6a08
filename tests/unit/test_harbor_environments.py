"""Harbor task environments without a Docker daemon: task.toml read, images keyed by content, the
internet refused unless allowed, reward.json's reward and metrics, the oracle and do-nothing agents."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harnesses.environments import Environments, TaskEnvironmentError, context_hash, task_tag
from harnesses.grading.verify import verify
from harnesses.task import TaskError, builtin_tasks_path, load_harbor, load_tasks
from rollouts.checks import CheckSettings, check_tasks
from sandboxes import SandboxSpec, create_sandbox
from sandboxes.kinds import KINDS
from tests.builders import run_config

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public"
ISOLATION = "bwrap" if shutil.which("bwrap") else "subprocess"


def test_a_public_style_task_loads_its_environment_from_task_toml():
    task = load_harbor(DATASET / "pytest-stats")
    env = task.environment
    assert env.context == DATASET / "pytest-stats" / "environment" and env.docker_image is None
    assert (env.build_timeout_s, env.memory_mb, env.allow_internet) == (900.0, 1024, False)
    assert task.verifier_env == {"STATS_EXPECTED_MEDIAN": "3"}
    assert task.files == {}  # the files are the image's (COPY), not ours to upload
    assert set(task.solution_files) == {"solve.sh"}
    greeting = load_harbor(DATASET / "fix-greeting").environment
    assert (greeting.cpus, greeting.memory_mb, greeting.storage_mb) == (1.0, 1024, 2048)
    assert load_harbor(DATASET / "json-config").environment.env == {"APP_ENV": "production"}


def test_the_dataset_has_six_tasks_in_the_public_form():
    tasks = load_tasks(DATASET)
    assert len(tasks) >= 6
    for task in tasks:
        dockerfile = (task.environment.context / "Dockerfile").read_text()
        assert "WORKDIR /app" in dockerfile and "COPY" in dockerfile, task.name
        assert "/app" in task.tests["test.sh"].decode() + task.tests.get("test_outputs.py", b"").decode()
    texts = [t.tests["test.sh"].decode() for t in tasks]
    assert any("reward.txt" in t for t in texts) and any("reward.json" in t for t in texts)
    assert sum("apt-get" in (t.environment.context / "Dockerfile").read_text() for t in tasks) >= 2
    assert "allow_internet = false" in (DATASET / "log-errors" / "task.toml").read_text()


def test_the_builtin_workspace_shortcut_has_no_environment():
    harbor = [t for t in load_tasks(builtin_tasks_path()) if t.dockerfile is not None]
    assert harbor and all(t.environment is None and t.files is not None for t in harbor)


def copy_task(tmp_path: Path, name: str = "csv-total") -> Path:
    folder = tmp_path / name
    shutil.copytree(DATASET / name, folder)
    return folder


def test_docker_image_in_task_toml_is_used_and_sizes_parse(tmp_path):
    folder = copy_task(tmp_path)
    (folder / "task.toml").write_text(
        '[environment]\ndocker_image = "acme/tool:1"\nmemory = "512M"\nstorage = "2G"\ncpus = 2\n'
    )
    env = load_harbor(folder).environment
    assert (env.docker_image, env.context, env.memory_mb, env.storage_mb, env.cpus) == (
        "acme/tool:1",
        None,
        512,
        2048,
        2.0,
    )


def test_a_bad_size_or_a_missing_machine_is_a_task_error_naming_the_file(tmp_path):
    folder = copy_task(tmp_path)
    (folder / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(TaskError, match=r"task.toml: \[environment\] memory = 'lots' is not a size"):
        load_harbor(folder)
    (folder / "task.toml").write_text("")
    (folder / "environment" / "Dockerfile").unlink()
    with pytest.raises(TaskError, match="neither environment/Dockerfile nor"):
        load_harbor(folder)


def test_the_image_tag_follows_the_build_context_content(tmp_path):
    folder = copy_task(tmp_path)
    context = folder / "environment"
    first = context_hash(context)
    assert context_hash(context) == first
    (context / "sales.csv").write_text("item,amount\npen,4\n")
    assert context_hash(context) != first
    (context / "sales.csv").write_text((DATASET / "csv-total" / "environment" / "sales.csv").read_text())
    assert context_hash(context) == first
    (context / "sales.csv").chmod(0o755)
    assert context_hash(context) != first  # an exec bit is part of what COPY copies
    assert task_tag(load_harbor(folder)) == "harnessrl-task/csv-total"


async def test_a_task_that_needs_the_internet_is_refused_unless_the_run_allows_it(tmp_path):
    folder = copy_task(tmp_path)
    (folder / "task.toml").write_text("[environment]\nallow_internet = true\n")
    task = load_harbor(folder)
    with pytest.raises(TaskEnvironmentError, match="allow_internet = true.*--allow-internet"):
        await Environments().sandbox_spec(task, "builtin", "docker", SandboxSpec())
    Environments(allow_internet=True).check(task)  # allowed: no refusal


async def test_without_docker_a_task_with_a_dockerfile_fails_naming_the_fix(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    task = load_harbor(DATASET / "csv-total")
    with pytest.raises(TaskEnvironmentError, match=r"needs a Docker daemon.*docker/setup-daemon.sh"):
        await Environments().sandbox_spec(task, "builtin", "local", SandboxSpec())


async def verdict_of(reward_script: str):
    task = load_tasks(builtin_tasks_path() / "harbor" / "gcd")[0]
    task = type(task)(**{**task.__dict__, "tests": {"test.sh": reward_script.encode()}})
    async with await create_sandbox("local", SandboxSpec(files=task.files), isolation=ISOLATION) as sandbox:
        return await verify(sandbox, task)


@pytest.mark.skipif(ISOLATION != "bwrap", reason="verifiers write /logs: apt-get install bubblewrap")
async def test_reward_json_gives_one_reward_and_its_other_keys_are_metrics():
    verdict = await verdict_of('echo \'{"reward": 0.75, "mean": 0.5, "median": 0.25}\' > /logs/verifier/reward.json')
    assert verdict.components == {"verifier": 0.75} and dict(verdict.metrics) == {"mean": 0.5, "median": 0.25}
    single = await verdict_of("echo '{\"a b\": 1}' > /logs/verifier/reward.json")
    assert single.components == {"verifier": 1.0}
    for bad in ('{"a": "high"}', '{"a": true}', "[1]", "{}", '{"mean": 0.5, "median": 0.25}'):
        verdict = await verdict_of(f"echo '{bad}' > /logs/verifier/reward.json")
        assert verdict.reward is None and "task harbor-gcd" in verdict.error, bad


@pytest.mark.skipif(ISOLATION != "bwrap", reason="verifiers write /logs: apt-get install bubblewrap")
async def test_oracle_scores_one_and_doing_nothing_zero_on_builtin_tasks_and_a_missing_solution_is_named():
    tasks = [t for t in load_tasks(builtin_tasks_path()) if t.name in ("fix-add", "harbor-gcd", "arith-add-small")]
    settings = CheckSettings(sandbox=KINDS["local"], sandbox_options={"isolation": ISOLATION})
    checks = await check_tasks(tasks, settings, Environments())
    assert [(c.task, c.oracle.reward, c.nop.reward, c.ok) for c in checks] == [(t.name, 1.0, 0.0, True) for t in tasks]
    unsolved = type(tasks[0])(**{**tasks[0].__dict__, "solution": None})
    [check] = await check_tasks([unsolved], settings, Environments())
    assert not check.ok and "has no reference solution: add solution/solve.sh" in check.oracle.reason


async def test_harnessrl_run_refuses_a_task_that_needs_the_internet_before_anything_runs(tmp_path):
    from rollouts.launch import launch_run

    folder = copy_task(tmp_path)
    (folder / "task.toml").write_text("[environment]\nallow_internet = true\n")
    with pytest.raises(TaskEnvironmentError, match="csv-total: task.toml says allow_internet = true"):
        config = run_config(tmp_path, "r", harness="oracle", group_size=1, concurrency=1, **{"sandbox.kind": "docker"})
        await launch_run(config, "http://127.0.0.1:9", None)
