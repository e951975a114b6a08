"""Links out of the agent's workspace are refused before grading (sandboxes/workspace_links.py): judged
by where they point inside the sandbox, whether or not the target exists yet, and links that stay in
the workspace kept. The container backends' listing script and removal, run here with the host's sh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from harnesses.grading.verify import MAX_REFUSED_BYTES, verify
from harnesses.task import Task
from sandboxes import SandboxSpec, create_sandbox
from sandboxes.workspace_links import (
    Link,
    host_links,
    list_command,
    outside_links,
    parse_listing,
    refuse_host_links,
    removal_commands,
)

WORKSPACE = "/app"
ISOLATION = "bwrap" if shutil.which("bwrap") else "subprocess"


def refused(links: dict[str, str]) -> set[str]:
    """The names (relative to /app) of the links that leave /app."""
    return {link.path for link in outside_links(WORKSPACE, {f"{WORKSPACE}/{k}": t for k, t in links.items()})}


def test_links_into_the_verifiers_folders_are_refused_though_their_targets_do_not_exist_yet():
    links = {
        "answer.txt": "/tests/expected.txt",
        "solution": "/solution/solve.sh",
        "reward": "/logs/verifier/reward.txt",
        "tmp": "/tmp/x",
        "root": "/",
        "passwd": "/etc/passwd",
    }
    assert refused(links) == set(links)


def test_a_workspace_at_the_root_still_refuses_links_into_the_verifiers_folders():
    links = {"/answer.txt": "/tests/expected.txt", "/work/r": "../logs/verifier/reward.txt", "/s": "solution/x"}
    links |= {"/work/kept": "/work/data.txt", "/etc-link": "/etc/passwd"}
    assert {link.path for link in outside_links("/", links)} == {"answer.txt", "work/r", "s"}


def test_relative_links_climbing_out_are_refused():
    links = {"up": "..", "tests": "../tests/expected.txt", "deep/er": "../../tests/x", "via/sub": "x/../../../etc"}
    assert refused(links) == set(links)


def test_a_chain_or_a_folder_link_leading_out_is_refused_at_every_link_of_it():
    links = {"a": "b", "b": "sub/c", "sub/c": "/tests/expected.txt", "dir": "/tests", "through": "dir/expected.txt"}
    assert refused(links) == set(links)


def test_a_loop_and_a_chain_longer_than_linuxs_limit_are_refused():
    chain = {f"l{i}": f"l{i + 1}" for i in range(45)} | {"l45": "end.txt"}
    assert refused({"self": "self", "x": "y", "y": "x"}) == {"self", "x", "y"}
    assert {"l0", "l5"} <= refused(chain) and "l44" not in refused(chain)


def test_links_that_stay_in_the_workspace_are_kept_relative_or_absolute():
    links = {
        "latest": "runs/3/out.txt",
        "abs": "/app/runs/3/out.txt",
        "sub/up": "../answer.txt",
        "here": ".",
        "top": "/app",
        "slashes": ".//runs//3/",
        "to-link": "latest",
        "through-dir": "runs-link/3",
        "runs-link": "runs",
        "dangling": "not/there/yet",
    }
    assert refused(links) == set()


def test_the_workspace_itself_as_a_link_is_refused():
    assert outside_links(WORKSPACE, {WORKSPACE: "/tests"}) == [Link(".", "/tests")]


def make_tree(root: Path) -> None:
    """A workspace with links in and out, in folders, with names no line-based reader could take."""
    (root / "odd\nname").mkdir(parents=True)
    (root / "kept.txt").write_text("42\n")
    os.symlink("../kept.txt", root / "odd\nname" / "in\n")
    os.symlink("/tests/expected.txt\n", root / "odd\nname" / "out")
    os.symlink(b"/tests/\xff", os.fsencode(root) + b"/\xfe")
    os.symlink("/tests", root / "dir")
    os.symlink("kept.txt", root / "answer.txt")


def test_the_listing_script_reads_every_link_as_the_host_walk_does(tmp_path):
    make_tree(tmp_path / "w")
    inside = str(tmp_path / "w")
    listed = subprocess.run(["sh", "-c", list_command(inside)], capture_output=True, check=True)
    assert parse_listing(listed.stdout) == host_links(tmp_path / "w", inside)
    assert len(parse_listing(listed.stdout)) == 5


def test_the_removal_commands_remove_the_refused_links_and_nothing_they_point_at(tmp_path):
    make_tree(tmp_path / "w")
    (tmp_path / "tests").mkdir()
    os.symlink(tmp_path / "tests", tmp_path / "w" / "host-dir")  # removing it must not empty what it names
    (tmp_path / "tests" / "expected.txt").write_text("42\n")
    inside = str(tmp_path / "w")
    links = outside_links(inside, host_links(tmp_path / "w", inside))
    assert {link.path for link in links} == {"odd\nname/out", "\udcfe", "dir", "host-dir"}
    for command in removal_commands(inside, links):
        subprocess.run(["sh", "-c", command], check=True)
    assert set(host_links(tmp_path / "w", inside)) == {f"{inside}/odd\nname/in\n", f"{inside}/answer.txt"}
    assert (tmp_path / "tests" / "expected.txt").read_text() == "42\n"


def test_the_host_walk_opens_an_unreadable_folder_and_gives_its_mode_back(tmp_path):
    (tmp_path / "w" / "locked").mkdir(parents=True)
    os.symlink("/tests/expected.txt", tmp_path / "w" / "locked" / "answer.txt")
    (tmp_path / "w" / "locked").chmod(0)
    try:
        assert refuse_host_links(tmp_path / "w", "/app") == [Link("locked/answer.txt", "/tests/expected.txt")]
        assert (tmp_path / "w" / "locked").stat().st_mode & 0o777 == 0
    finally:
        (tmp_path / "w" / "locked").chmod(0o755)
    assert os.listdir(tmp_path / "w" / "locked") == []


def test_a_workspace_folder_replaced_by_a_link_is_made_again_empty(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "expected.txt").write_text("42\n")
    os.symlink(tmp_path / "elsewhere", tmp_path / "w")
    assert refuse_host_links(tmp_path / "w", "/app") == [Link(".", str(tmp_path / "elsewhere"))]
    assert (tmp_path / "w").is_dir() and not (tmp_path / "w").is_symlink() and not os.listdir(tmp_path / "w")
    assert (tmp_path / "elsewhere" / "expected.txt").exists()


def compare_task(verifier: str = "cmp -s answer.txt /tests/expected.txt") -> Task:
    return Task(
        name="compare",
        instruction="Write the expected answer into answer.txt.",
        tests={"expected.txt": b"42\n"},
        verifier=verifier,
        reward_source="exit_code",
    )


async def test_verify_grades_without_the_link_and_names_it_in_the_detail_and_the_log():
    async with await create_sandbox("local", SandboxSpec(), isolation=ISOLATION) as sandbox:
        done = await sandbox.exec("ln -s /tests/expected.txt answer.txt && ln -s answer.txt again", timeout_s=60)
        assert done.ok, done.text()
        verdict = await verify(sandbox, compare_task())
    assert verdict.reward == 0.0, verdict.output
    assert {str(link) for link in verdict.refused_links} == {"answer.txt -> /tests/expected.txt", "again -> answer.txt"}
    assert verdict.detail()["refused_links"]["count"] == 2
    assert verdict.output.startswith("[harnessrl: 2 links out of the workspace removed")


async def test_an_honest_link_in_the_workspace_still_scores_one():
    async with await create_sandbox("local", SandboxSpec(), isolation=ISOLATION) as sandbox:
        done = await sandbox.exec(
            "mkdir out && echo 42 > out/answer.txt && ln -s out/answer.txt answer.txt", timeout_s=60
        )
        assert done.ok, done.text()
        verdict = await verify(sandbox, compare_task())
    assert (verdict.reward, verdict.refused_links) == (1.0, ()), verdict.output
    assert "refused_links" not in verdict.detail()


async def test_many_refused_links_are_all_counted_and_their_names_kept_within_bounds():
    async with await create_sandbox("local", SandboxSpec(), isolation=ISOLATION) as sandbox:
        done = await sandbox.exec("for i in $(seq 300); do ln -s /tests/expected.txt link-$i; done", timeout_s=60)
        assert done.ok, done.text()
        verdict = await verify(sandbox, compare_task("test ! -e link-1"))
    assert verdict.reward == 1.0, verdict.output
    kept = verdict.detail()["refused_links"]
    assert kept["count"] == 300 and 0 < len(kept["links"]) < 300
    assert len(json.dumps(kept["links"])) <= MAX_REFUSED_BYTES
