"""Datasets resolved the OpenEnv way: ``--tasks harbor:SPEC`` (or ``hf:ORG/NAME``).

``SPEC`` is whatever ``openenv.harbor.tasks.resolve_task_dirs`` resolves, by shape:

- a local folder of Harbor tasks (``tasks/<name>/`` or nested groups of them);
- a Hugging Face dataset repo ``ORG/NAME`` laid out as ``tasks/<name>/``, downloaded once as real
  files into ``$OPENENV_DATASET_CACHE`` (default ``~/.cache/openenv/harbor-datasets``);
- a Harbor registry dataset ``NAME@VERSION`` (needs the ``harbor`` package, Python >= 3.12).

Each task folder OpenEnv lists is then read by our own Harbor loader (``harnesses.task``). A spec
that needs the network where there is none fails with a ``TaskError`` that says so and how to get
the tasks another way, never a traceback or a hang.
"""

from __future__ import annotations

from pathlib import Path

from harnesses.task import Task, TaskError, load_tasks

PREFIXES = ("harbor:", "hf:")


def is_openenv_dataset(source: str) -> bool:
    return source.startswith(PREFIXES)


def load_openenv_dataset(source: str) -> list[Task]:
    """The tasks of ``harbor:SPEC`` / ``hf:ORG/NAME``."""
    prefix, _, spec = source.partition(":")
    if not spec:
        raise TaskError(
            f"--tasks {source!r} names no dataset: use harbor:FOLDER, harbor:ORG/NAME, "
            f"harbor:NAME@VERSION or hf:ORG/NAME"
        )
    if prefix == "hf" and (spec.count("/") != 1 or "@" in spec or spec.startswith((".", "/", "~"))):
        raise TaskError(f"--tasks {source!r}: hf: takes a Hugging Face dataset repo ORG/NAME")
    if spec.startswith((".", "/", "~")) and not Path(spec).expanduser().is_dir():
        raise TaskError(f"--tasks {source}: {spec} is not a folder")
    tasks = []
    for folder in _task_dirs(source, spec):
        tasks += load_tasks(folder)
    return tasks


def _task_dirs(source: str, spec: str) -> list[Path]:
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError
    from openenv.harbor.tasks import resolve_task_dirs

    try:
        return resolve_task_dirs(spec)
    except LocalEntryNotFoundError as exc:  # offline, or huggingface.co unreachable, and nothing cached
        raise TaskError(
            f"--tasks {source}: {spec} is a Hugging Face dataset repo, and downloading it needs "
            f"network access to the Hugging Face Hub (huggingface.co or $HF_ENDPOINT), which this "
            f"machine does not have ({_first_line(exc)}). Download it where there is network "
            f"(`hf download {spec} --repo-type dataset --local-dir DIR`) and pass --tasks DIR"
        ) from None
    except RepositoryNotFoundError:
        raise TaskError(
            f"--tasks {source}: the Hugging Face Hub has no dataset repo {spec!r} (or it is private: set HF_TOKEN)"
        ) from None
    except ModuleNotFoundError as exc:
        if exc.name != "harbor":
            raise
        raise TaskError(
            f"--tasks {source}: {spec} is a Harbor registry dataset (NAME@VERSION); resolving it needs "
            f"the harbor package (pip install harbor, Python >= 3.12) and network access to the "
            f"Harbor registry and the dataset's git host. Or clone the dataset and pass its folder"
        ) from None
    except ValueError as exc:  # no task folder found under the spec
        raise TaskError(f"--tasks {source}: {exc}") from None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
