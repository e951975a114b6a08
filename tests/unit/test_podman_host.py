"""The podman set-up's choice: the runtime and ulimits a container really starts with on this host, tried
against a stand-in podman that refuses what the host of issue 59 refused (crun, and nproc at the hard limit)."""

import os
import stat
import sys
from pathlib import Path

import pytest

from sandboxes.podman_host import (
    NoWorkingSetting,
    PodmanSetting,
    candidates,
    check_podman_starts,
    choose,
    configure,
    main,
    podman_start,
)

HARD_NPROC = 96553

# A stand-in podman with that host's rules: crun never starts ("cgroups in hybrid mode"); runc starts below
# the hard nproc only. A plain `run` reads the runtime and nproc from the drop-in written by the set-up.
STAND_IN = f"""#!{sys.executable}
import re, sys
from pathlib import Path
args = sys.argv[1:]
Path(__file__).with_suffix(".log").open("a").write(" ".join(args) + "\\n")
conf = Path(__file__).parent / "drop-in.conf"
text = conf.read_text() if conf.exists() else 'runtime = "crun"\\nnproc={HARD_NPROC}:'
runtime = args[args.index("--runtime") + 1] if "--runtime" in args else re.search(r'runtime = "(\\w+)"', text)[1]
nproc = int((re.search(r"nproc=(\\d+)", " ".join(args)) or re.search(r"nproc=(\\d+)", text))[1])
if runtime == "crun":
    sys.exit("Error: crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2")
if nproc >= {HARD_NPROC - 1}:
    sys.exit("Error: runc: setrlimit RLIMIT_NPROC: operation not permitted")
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    podman = tmp_path / "podman"
    podman.write_text(STAND_IN)
    podman.chmod(podman.stat().st_mode | stat.S_IEXEC)
    return podman


def test_candidates_try_the_hard_limits_first_then_lower_ones_per_runtime():
    tried = candidates(["crun", "runc"], 20000, HARD_NPROC)
    assert [(s.runtime, s.nproc) for s in tried if s.nofile == 20000] == [
        ("crun", HARD_NPROC),
        ("crun", 32768),
        ("crun", 4096),
        ("runc", HARD_NPROC),
        ("runc", 32768),
        ("runc", 4096),
    ]
    assert all(s.nofile <= 20000 and s.nproc <= HARD_NPROC for s in tried)
    assert {s.nproc for s in candidates(["runc"], 1024, 2000)} == {2000}  # never above the host's limit


def test_the_set_up_picks_runc_below_the_hard_nproc_where_crun_and_the_hard_limit_are_refused(stand_in, monkeypatch):
    monkeypatch.setattr("sandboxes.podman_host.host_limits", lambda: (20000, HARD_NPROC))
    drop_in = stand_in.parent / "drop-in.conf"
    chosen = configure("base", podman_start(str(stand_in)), drop_in, runtimes=["crun", "runc"])
    assert chosen == PodmanSetting("runc", 20000, 32768)
    assert 'runtime = "runc"' in drop_in.read_text() and '"nproc=32768:32768"' in drop_in.read_text()
    last = stand_in.with_suffix(".log").read_text().splitlines()[-1]
    assert last == "run --rm --network none base true"  # proven with a plain start under the written drop-in


def test_the_set_up_says_why_and_fails_when_nothing_starts(stand_in, monkeypatch, capsys):
    monkeypatch.setattr("sandboxes.podman_host.host_limits", lambda: (20000, HARD_NPROC))
    monkeypatch.setattr("sandboxes.podman_host.installed_runtimes", lambda: ["crun"])
    drop_in = stand_in.parent / "drop-in.conf"
    assert main(["--image", "base", "--podman", str(stand_in), "--drop-in", str(drop_in)]) == 1
    said = capsys.readouterr().err
    assert "no podman runtime and ulimits tried could start a container" in said
    assert "crun, nofile 20000, nproc 4096: Error: crun: cgroups in hybrid mode not supported" in said
    assert not drop_in.exists()  # nothing written that was not seen to work


def test_choose_raises_with_every_try_when_all_fail():
    with pytest.raises(NoWorkingSetting) as refused:
        choose("base", candidates(["crun"], 1024, 4096), lambda args: "refused")
    assert str(refused.value).endswith("\n  crun, nofile 1024, nproc 4096: refused")  # the one try, its error


def test_the_preflight_check_names_the_fix_when_podman_cannot_start(stand_in):
    with pytest.raises(RuntimeError) as refused:
        check_podman_starts("base", podman_start(str(stand_in)))  # no drop-in: crun, as a fresh host has it
    message = str(refused.value)
    assert "cgroups in hybrid mode not supported" in message
    assert "sudo tests/setup_machine.sh" in message and 'runtime = "runc"' in message


def test_a_missing_podman_binary_is_an_error_not_a_traceback(tmp_path):
    error = podman_start(os.fspath(tmp_path / "no-podman"))(["run", "base", "true"])
    assert error is not None and "no-podman" in error
