"""Datasets: nested Harbor folders, JSONL and list files; name globs; a split fixed by each task's name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesses.datasets import Selection, load_dataset, load_selection, select
from harnesses.splits import split_of
from harnesses.task import Task, TaskError


def harbor_task(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "instruction.md").write_text(f"do {name}")
    (folder / "task.toml").write_text(f'[metadata]\nname = "{name}"\n')
    (folder / "tests").mkdir()
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return folder


def jsonl_file(path: Path, names: list[str]) -> Path:
    path.write_text("".join(json.dumps({"name": n, "instruction": "x", "verifier": "true"}) + "\n" for n in names))
    return path


def names(tasks: list[Task]) -> list[str]:
    return [t.name for t in tasks]


def test_a_nested_folder_of_harbor_tasks_loads_every_task(tmp_path):
    harbor_task(tmp_path / "suite-a" / "easy" / "one", "one")
    harbor_task(tmp_path / "suite-a" / "hard" / "two", "two")
    harbor_task(tmp_path / "suite-b" / "three", "three")
    assert names(load_dataset(tmp_path)) == ["one", "three", "two"]


def test_a_list_file_names_folders_and_jsonl_files_relative_to_itself(tmp_path):
    harbor_task(tmp_path / "tasks" / "alpha", "alpha")
    jsonl_file(tmp_path / "more.jsonl", ["beta", "gamma"])
    listing = tmp_path / "lists" / "mine.txt"
    listing.parent.mkdir()
    listing.write_text("# my tasks\n../tasks/alpha\n\n../more.jsonl  # two small ones\n")
    assert names(load_dataset(listing)) == ["alpha", "beta", "gamma"]


def test_a_list_file_entry_that_does_not_exist_names_the_line(tmp_path):
    listing = tmp_path / "tasks.txt"
    listing.write_text("missing-folder\n")
    with pytest.raises(TaskError, match=r"tasks.txt:1: missing-folder does not exist"):
        load_dataset(listing)


def test_a_jsonl_file_without_the_suffix_is_still_jsonl(tmp_path):
    assert names(load_dataset(jsonl_file(tmp_path / "tasks.data", ["b", "a"]))) == ["a", "b"]


def test_duplicate_names_across_list_entries_are_refused(tmp_path):
    jsonl_file(tmp_path / "one.jsonl", ["same"])
    jsonl_file(tmp_path / "two.jsonl", ["same"])
    (tmp_path / "list.txt").write_text("one.jsonl\ntwo.jsonl\n")
    with pytest.raises(TaskError, match="unique"):
        load_dataset(tmp_path / "list.txt")


def test_include_and_exclude_globs_filter_by_task_name(tmp_path):
    tasks = load_dataset(jsonl_file(tmp_path / "t.jsonl", ["py-fix-1", "py-fix-2", "sh-count", "py-new"]))
    chosen = select(tasks, Selection(include=("py-*",), exclude=("*-2",)))
    assert names(chosen) == ["py-fix-1", "py-new"]


def test_train_and_test_splits_partition_the_tasks_and_follow_the_fraction():
    tasks = [Task(name=f"task-{i:04d}", instruction="x") for i in range(2000)]
    train = set(names(select(tasks, Selection(split="train", test_fraction=0.25))))
    test = set(names(select(tasks, Selection(split="test", test_fraction=0.25))))
    assert train.isdisjoint(test) and train | test == {t.name for t in tasks}
    assert 0.22 < len(test) / len(tasks) < 0.28


def test_a_tasks_split_depends_on_its_name_alone_not_on_the_rest_of_the_dataset():
    tasks = [Task(name=f"t{i}", instruction="x") for i in range(200)]
    full = {t.name: split_of(t.name, 0.3) for t in tasks}
    half = select(tasks[:100], Selection(split="test", test_fraction=0.3, include=("t*",)))
    assert all(full[t.name] == "test" for t in half)
    assert split_of("t7", 0.3) == split_of("t7", 0.3)  # stable across calls (and processes: sha256)
    assert split_of("some-task", 0.0) == "train" and split_of("some-task", 1.0) == "test"


def test_the_builtin_family_has_a_held_out_split_disjoint_from_its_train_split():
    train = names(load_selection("builtin:arithmetic", Selection(split="train")))
    test = names(load_selection("builtin:arithmetic", Selection(split="test")))
    assert test and train and not set(train) & set(test)


def test_an_empty_selection_names_the_options_to_change(tmp_path):
    with pytest.raises(TaskError, match="--include/--exclude"):
        load_selection(jsonl_file(tmp_path / "t.jsonl", ["a"]), Selection(include=("zzz*",)))
    with pytest.raises(TaskError, match="--split must be one of"):
        Selection(split="validation")
    with pytest.raises(TaskError, match="unknown built-in dataset"):
        load_dataset("builtin:nope")


def test_no_held_out_arithmetic_task_asks_a_training_tasks_question():
    tasks = load_dataset("builtin:arithmetic")
    assert len({t.instruction for t in tasks}) == len(tasks) == 20
