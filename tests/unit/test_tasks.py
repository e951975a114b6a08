"""The built-in task set: both forms load, every reference solution scores 1, doing nothing scores 0."""

from __future__ import annotations

import json
import shutil

import pytest

from harnesses.grading.verify import verify
from harnesses.task import TaskError, builtin_tasks_path, load_tasks
from sandboxes import SandboxSpec, create_sandbox

TASKS = load_tasks(builtin_tasks_path())
ISOLATION = "bwrap" if shutil.which("bwrap") else "subprocess"


def test_the_builtin_set_has_at_least_30_tasks_in_both_forms():
    assert len(TASKS) >= 30
    assert len({t.name for t in TASKS}) == len(TASKS)
    harbor = [t for t in TASKS if t.dockerfile is not None]
    assert len(harbor) >= 5 and all(t.tests.get("test.sh") for t in harbor)
    assert all(t.solution for t in TASKS)


async def score(task, with_solution: bool) -> float | None:
    async with await create_sandbox("local", SandboxSpec(files=task.files), isolation=ISOLATION) as sandbox:
        if with_solution:
            result = await sandbox.exec(task.solution, timeout_s=60)
            assert result.exit_code == 0, result.text()
        return (await verify(sandbox, task)).reward


@pytest.mark.skipif(
    ISOLATION != "bwrap", reason="Harbor verifiers write /logs: needs an isolated sandbox (apt-get install bubblewrap)"
)
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
async def test_reference_solution_scores_one_and_doing_nothing_scores_zero(task):
    assert await score(task, with_solution=True) == 1.0
    assert await score(task, with_solution=False) == 0.0


def test_malformed_jsonl_names_the_line_and_the_fields(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"name": "ok", "instruction": "x", "verifier": "true"}) + '\n{"name": "bad"}\n')
    with pytest.raises(TaskError, match=r"tasks.jsonl:2: .*needs name, instruction, verifier"):
        load_tasks(path)


def test_missing_task_path_names_the_option(tmp_path):
    with pytest.raises(TaskError, match="--tasks"):
        load_tasks(tmp_path / "nope")


def builtin(name: str):
    return next(t for t in TASKS if t.name == name)


# What a reward-seeking agent leaves behind: a reward file the verifier may not overwrite, fake
# tests that pass, and a process that keeps writing the reward file.
FORGE = (
    "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
    "echo '{\"reward\": 1}' > /logs/verifier/reward.json && "
    "printf 'import sys; sys.exit(0)\\n' > /tests/check.py && "
    "printf 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && "
    "(setsid sh -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "sleep 0.02; done' >/dev/null 2>&1 &) && "
    "chmod 444 /logs/verifier/reward.txt && chmod 555 /logs/verifier"
)  # the verifier cannot overwrite it


@pytest.mark.parametrize("name", ["arith-add-small", "fix-add", "harbor-gcd"])  # JSONL exit codes, a Harbor reward.txt
async def test_what_the_agent_wrote_to_the_verifier_folders_never_counts(name):
    task = builtin(name)
    async with await create_sandbox("local", SandboxSpec(files=task.files), isolation=ISOLATION) as sandbox:
        forged = await sandbox.exec(FORGE, timeout_s=30)
        assert forged.ok, forged.text()
        verdict = await verify(sandbox, task)
        assert (verdict.reward, verdict.error) == (0.0, None), verdict.output
        listed = await sandbox.exec("ls -A /tests", timeout_s=60)
        assert listed.stdout.decode().split() == sorted(task.tests)  # only the task's own tests
        for path, data in task.tests.items():
            assert await sandbox.get_file(f"/tests/{path}") == data


async def test_a_failed_exit_code_check_is_zero_whatever_reward_file_the_agents_code_writes():
    task = builtin("fix-add")  # its check imports the agent's add.py
    planted = b"open('/logs/verifier/reward.txt', 'w').write('1')\ndef add(a, b):\n    return a - b\n"
    async with await create_sandbox("local", SandboxSpec(files={"add.py": planted}), isolation=ISOLATION) as sandbox:
        verdict = await verify(sandbox, task)
        assert verdict.exit_code != 0 and verdict.reward == 0.0
        assert await sandbox.get_file("/logs/verifier/reward.txt") == b"1"  # written, and ignored
    assert task.reward_source == "exit_code" and builtin("harbor-gcd").reward_source == "file"


def jsonl_task(tmp_path, **fields):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"name": "t", "instruction": "x", "verifier": "true", **fields}) + "\n")
    return path


@pytest.mark.parametrize("key", ["../escape.txt", "/etc/cron.d/x", "a/../../escape.txt", "..", "", "a\\..\\x"])
@pytest.mark.parametrize("field", ["files", "tests"])
def test_jsonl_file_paths_that_leave_the_folder_are_refused_at_load(tmp_path, key, field):
    with pytest.raises(TaskError, match=rf"tasks.jsonl:1 {field}: path .* leaves the task's folder"):
        load_tasks(jsonl_task(tmp_path, **{field: {key: "x"}}))


def test_jsonl_paths_are_normalised_and_a_reward_file_is_opt_in(tmp_path):
    [task] = load_tasks(jsonl_task(tmp_path, files={"a/./b.txt": "x"}))
    assert list(task.files) == ["a/b.txt"] and task.reward_source == "exit_code"
    [task] = load_tasks(jsonl_task(tmp_path, reward_file=True))
    assert task.reward_source == "file"


@pytest.mark.parametrize("where", ["environment/workspace", "tests"])
def test_harbor_tasks_with_symbolic_links_are_refused_at_load(tmp_path, where):
    folder = tmp_path / "task"
    shutil.copytree(builtin_tasks_path() / "harbor" / "gcd", folder)
    (folder / where / "stolen").symlink_to("/etc/passwd")
    with pytest.raises(TaskError, match="stolen is a symbolic link"):
        load_tasks(folder)


def test_a_task_check_names_the_tests_that_failed_else_the_verifiers_last_line():
    from rollouts.checks import said_by

    verbose = "tests/test_a.py::test_one PASSED\ntests/test_a.py::test_two FAILED\n"
    summary = "=== short test summary info ===\nFAILED tests/test_a.py::test_two - assert 1 == 2\n1 failed, 1 passed\n"
    assert said_by(verbose + summary) == "failed tests/test_a.py::test_two"
    many = "".join(f"FAILED t.py::test_{n}\n" for n in range(12))
    assert said_by(many).endswith("t.py::test_9 and 2 more")
    assert said_by("collected 3 items\n\n3 passed\n") == "'3 passed'"
    assert said_by("") == "(no output)"


def test_task_toml_settings_harnessrl_does_not_honour_are_named_never_dropped_silently(tmp_path):
    from harnesses.task import load_harbor, unhonoured_warning

    for name, toml in (
        ("a", '[environment]\nnetwork_mode = "none"\ngpus = 1\ncpus = 1\n[verifier]\ntimeout_sec = 5\nuser = "x"\n'),
        ("b", 'version = "1.3"\n[metadata]\nauthor = "me"\n[environment]\nnetwork_mode = "bridge"\n'),
        ("c", 'version = "1.0"\n[verifier]\nreward_key = "score"\n'),
    ):
        folder = tmp_path / name
        (folder / "environment" / "workspace").mkdir(parents=True)
        (folder / "instruction.md").write_text("Do it.\n")
        (folder / "task.toml").write_text(toml)
    tasks = [load_harbor(tmp_path / name) for name in "abc"]
    assert tasks[0].unhonoured == ("[environment] network_mode", "[environment] gpus", "[verifier] user")
    assert tasks[2].unhonoured == ()
    assert unhonoured_warning(tasks) == (
        "warning: harnessrl does not honour these task.toml settings, which are ignored: "
        "[environment] gpus (1 task), [environment] network_mode (2 tasks), [verifier] user (1 task)"
    )
    assert unhonoured_warning(tasks[2:]) is None
