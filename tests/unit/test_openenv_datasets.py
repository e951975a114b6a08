"""--tasks harbor:SPEC / hf:ORG/NAME: datasets resolved by openenv.harbor.tasks; a spec that needs the network
where there is none says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest

from harnesses.datasets import load_dataset
from harnesses.task import TaskError

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public"


def test_a_local_folder_resolves_through_openenv():
    tasks = load_dataset(f"harbor:{PUBLIC}")
    assert [t.name for t in tasks] == sorted(p.name for p in PUBLIC.iterdir() if (p / "task.toml").is_file())
    assert all(t.instruction and t.tests for t in tasks)


def test_a_dataset_laid_out_as_tasks_and_nested_groups_resolves(tmp_path):
    for group, task in (("science", "fix-greeting"), ("ops", "json-config")):
        shutil.copytree(PUBLIC / task, tmp_path / "tasks" / group / task)
    assert [t.name for t in load_dataset(f"harbor:{tmp_path}")] == ["fix-greeting", "json-config"]


def test_a_hugging_face_repo_without_network_names_the_missing_network(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("OPENENV_DATASET_CACHE", str(tmp_path))
    for source in ("hf:openenv/harbor-smoke", "harbor:openenv/harbor-smoke"):
        with pytest.raises(TaskError, match="needs network access to the Hugging Face Hub") as caught:
            load_dataset(source)
        assert "--tasks DIR" in str(caught.value)


def test_a_registry_spec_names_what_it_needs():
    with pytest.raises(TaskError, match="Harbor registry dataset .* network access"):
        load_dataset("harbor:terminal-bench@2.0")


@pytest.mark.parametrize(
    ("source", "message"),
    [("harbor:", "names no dataset"), ("hf:./here", "ORG/NAME"), ("harbor:./no-such-folder", "is not a folder")],
)
def test_malformed_specs_name_the_fix(source, message):
    with pytest.raises(TaskError, match=message):
        load_dataset(source)


def test_an_empty_folder_is_an_error_not_an_empty_dataset(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "notes").mkdir()
    with pytest.raises(TaskError, match="no Harbor tasks found"):
        load_dataset(f"harbor:{tmp_path}")
