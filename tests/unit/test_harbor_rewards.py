"""Harbor's reward contract: reward.json's key ``reward`` is the reward and its other numbers are metrics,
never added to it; reward.txt is the fallback; a reward is a finite number; the verifier's log is kept
bounded, head and tail."""

from __future__ import annotations

import json
import shutil

import pytest

from harnesses.grading.verify import MAX_LOG_BYTES, RewardFileError, Verdict, bounded_log, read_reward, verify
from harnesses.task import Task, TaskError, load_harbor, load_jsonl
from sandboxes import SandboxSpec, create_sandbox

ISOLATION = "bwrap" if shutil.which("bwrap") else "subprocess"
needs_bwrap = pytest.mark.skipif(ISOLATION != "bwrap", reason="verifiers write /logs: apt-get install bubblewrap")


def harbor_task(reward_key: str | None = None, test_sh: str = "true") -> Task:
    """A Harbor-form task (its reward comes from the verifier's files) whose test.sh is ``test_sh``."""
    return Task(name="stats", instruction="x", tests={"test.sh": test_sh.encode()}, reward_key=reward_key)


def reward_of(reward_json: dict | str | None, reward_txt: str | None = None, reward_key: str | None = None):
    text = reward_json if reward_json is None or isinstance(reward_json, str) else json.dumps(reward_json)
    return read_reward(harbor_task(reward_key), text, reward_txt)


def test_the_reward_key_is_the_reward_and_the_other_numbers_are_metrics_never_added():
    assert reward_of({"reward": 1.0, "cases_passed": 5, "ratio": 0.5}) == (1.0, {"cases_passed": 5.0, "ratio": 0.5})


def test_fields_that_are_not_finite_numbers_are_ignored_as_metrics():
    data = '{"reward": 0.5, "note": "ok", "flag": true, "list": [1], "nan": NaN, "big": 1e999, "n": 2}'
    assert reward_of(data) == (0.5, {"n": 2.0})


def test_a_single_numeric_key_without_reward_is_the_reward():
    assert reward_of({"score": 0.25, "note": "text"}) == (0.25, {})


def test_several_numbers_without_a_reward_key_are_refused_naming_the_task_and_the_fix():
    with pytest.raises(RewardFileError) as refused:
        reward_of({"mean": 0.5, "median": 0.25})
    message = str(refused.value)
    assert "task stats" in message and "'mean'" in message and "'median'" in message
    assert '"reward"' in message and "[verifier] reward_key" in message


def test_reward_key_names_the_reward_and_the_reward_key_becomes_a_metric():
    assert reward_of({"score": 0.75, "reward": 3, "cases": 4}, reward_key="score") == (
        0.75,
        {"reward": 3.0, "cases": 4.0},
    )
    with pytest.raises(RewardFileError, match="no key 'score'.*reward_key"):
        reward_of({"points": 1.0}, reward_key="score")  # named and missing: no guessing at another key


def test_reward_txt_is_the_reward_when_reward_json_has_no_reward_key():
    assert reward_of({"mean": 0.5, "median": 0.25}, reward_txt="0.8\n") == (0.8, {"mean": 0.5, "median": 0.25})
    assert reward_of(None, reward_txt="1\n") == (1.0, {})
    assert reward_of(None, None) == (None, {})  # no file: the verifier's exit status decides


def test_reward_json_takes_precedence_over_reward_txt():
    assert reward_of({"reward": 0.0}, reward_txt="1") == (0.0, {})


@pytest.mark.parametrize(
    "value", ["true", '"1"', "NaN", "Infinity", "-Infinity", "1e999", "null", "[1]", "1" + "0" * 400]
)
def test_a_reward_that_is_not_a_finite_number_is_refused(value):
    with pytest.raises(RewardFileError, match="task stats.*a reward is a finite number"):
        reward_of(f'{{"reward": {value}, "cases": 1}}')


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "lots"])
def test_a_reward_txt_that_is_not_a_finite_number_is_refused(text):
    with pytest.raises(RewardFileError, match="task stats"):
        reward_of(None, reward_txt=text)


def test_empty_reward_files_are_errors():
    with pytest.raises(RewardFileError, match="reward.json is empty"):
        reward_of("")
    with pytest.raises(RewardFileError, match="reward.txt is empty"):
        reward_of(None, reward_txt="")
    with pytest.raises(RewardFileError, match="reward.txt is empty"):
        reward_of({"mean": 0.5, "median": 0.5}, reward_txt="\n")


@pytest.mark.parametrize("text", ["[1]", "1", "not json", "{}"])
def test_reward_json_that_is_no_object_of_numbers_is_refused(text):
    with pytest.raises(RewardFileError, match="task stats"):
        reward_of(text)


def test_the_verdict_is_one_component_and_its_detail_carries_the_metrics():
    verdict = Verdict(1.0, 0, "3 passed", metrics={"cases_passed": 5.0})
    assert verdict.components == {"verifier": 1.0}
    assert verdict.detail() == {"exit_code": 0, "metrics": {"cases_passed": 5.0}, "log": "3 passed"}
    failed = Verdict(None, 1, "", "task t: reward.json is empty")
    assert failed.detail()["error"] == "task t: reward.json is empty"


def test_a_long_log_keeps_its_head_and_tail_and_says_where_it_was_cut():
    text = "first line\n" + "x" * 200_000 + "\nlast line: 3 failed"
    log = bounded_log(text)
    assert log.startswith("first line") and log.endswith("last line: 3 failed")
    assert "characters of the verifier's output cut here" in log
    assert len(json.dumps(log)) <= MAX_LOG_BYTES
    escaped = "\x01é" * 100_000  # 6 bytes of JSON per character
    assert len(json.dumps(bounded_log(escaped))) <= MAX_LOG_BYTES
    assert bounded_log("short output") == "short output"


def test_reward_key_loads_from_task_toml_and_jsonl(tmp_path):
    folder = tmp_path / "stats"
    (folder / "environment" / "workspace").mkdir(parents=True)
    (folder / "instruction.md").write_text("x")
    (folder / "task.toml").write_text('[verifier]\nreward_key = "score"\n')
    assert load_harbor(folder).reward_key == "score"
    (folder / "task.toml").write_text("[verifier]\nreward_key = 3\n")
    with pytest.raises(TaskError, match="reward_key"):
        load_harbor(folder)
    lines = tmp_path / "tasks.jsonl"
    task = {"name": "t", "instruction": "x", "verifier": "true", "reward_file": True, "reward_key": "score"}
    lines.write_text(json.dumps(task) + "\n")
    assert load_jsonl(lines)[0].reward_key == "score"


async def verdict_of(test_sh: str, reward_key: str | None = None) -> Verdict:
    async with await create_sandbox("local", SandboxSpec(), isolation=ISOLATION) as sandbox:
        return await verify(sandbox, harbor_task(reward_key, test_sh))


@needs_bwrap
async def test_a_verifier_in_a_sandbox_gives_its_reward_its_metrics_and_its_output():
    verdict = await verdict_of(
        "echo '5 passed'; echo '{\"reward\": 1.0, \"cases_passed\": 5}' > /logs/verifier/reward.json"
    )
    assert (verdict.reward, dict(verdict.metrics), verdict.error) == (1.0, {"cases_passed": 5.0}, None)
    assert verdict.components == {"verifier": 1.0} and "5 passed" in verdict.output


@needs_bwrap
async def test_a_verifier_whose_reward_json_is_ambiguous_leaves_no_reward_and_records_why():
    verdict = await verdict_of('echo \'{"mean": 0.5, "median": 0.25}\' > /logs/verifier/reward.json')
    assert verdict.reward is None and "task stats" in verdict.error and "reward_key" in verdict.error
    assert (await verdict_of("printf '' > /logs/verifier/reward.json")).error.endswith(
        "is empty: the verifier must write its reward there"
    )
    keyed = await verdict_of('echo \'{"mean": 0.5, "median": 0.25}\' > /logs/verifier/reward.json', "median")
    assert (keyed.reward, dict(keyed.metrics)) == (0.25, {"mean": 0.5})
