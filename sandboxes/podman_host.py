"""podman on this host: a runtime and ulimits under which a container starts, found by starting one.

Machines of this kind differ, and a configuration written without trying it hides that:

- podman's default ulimits (1,048,576 open files) are above their hard limits: every start fails;
- on one, crun refused nproc at the host's hard limit ("setrlimit RLIMIT_NPROC: Operation not
  permitted") and, with lower limits, the cgroup layout (cgroup v1 with a cgroup2 mount beside it:
  "cgroups in hybrid mode not supported"), while runc started containers with nproc 32768 but not at
  the hard limit.

So the set-up (``python -m sandboxes.podman_host``, run by tests/setup_machine.sh) tries the runtimes
installed, each with the host's hard limits and then lower ones, by a real container start, writes the
first that works to a containers.conf drop-in, and proves a plain ``podman run`` starts under it.
``--sandbox harbor:podman``'s preflight (``check_podman_starts``) starts one container under what is
configured and, when it fails, names the fix before any rollout.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandboxes.harbor_images import image_id, in_podman
from sandboxes.protocol import SandboxError

DROP_IN = Path("/etc/containers/containers.conf.d/harnessrl.conf")  # read after containers.conf: it wins
RUNTIMES = ("crun", "runc")  # podman's default first; runc where crun refuses the cgroup layout
NPROC_FALLBACKS = (32768, 4096)  # processes: below a hard limit some kernels' setrlimit refuses
NOFILE_FALLBACKS = (1024,)
PROBE_IMAGE = "debian:bookworm-slim"  # the offline base docker/setup-daemon.sh builds (python3 inside)
START_TIMEOUT_S = 120  # a first start on a slow disk sets up podman's storage


@dataclass(frozen=True)
class PodmanSetting:
    runtime: str  # the OCI runtime's name, as podman's --runtime takes it
    nofile: int  # open files a container may hold (soft = hard)
    nproc: int  # processes a container's user may run (soft = hard)

    def start_args(self, image: str) -> list[str]:
        """podman's arguments that start ``image`` once under this setting."""
        limits = ["--ulimit", f"nofile={self.nofile}:{self.nofile}", "--ulimit", f"nproc={self.nproc}:{self.nproc}"]
        return ["--runtime", self.runtime, "run", "--rm", "--network", "none", *limits, image, "true"]

    def config(self) -> str:
        """The containers.conf drop-in that makes this podman's default."""
        return (
            "# Written by `python -m sandboxes.podman_host` (tests/setup_machine.sh): the runtime and\n"
            "# ulimits a container was seen to start with on this host.\n"
            "[containers]\n"
            f'default_ulimits = ["nofile={self.nofile}:{self.nofile}", "nproc={self.nproc}:{self.nproc}"]\n'
            "\n[engine]\n"
            f'runtime = "{self.runtime}"\n'
        )


class NoWorkingSetting(RuntimeError):
    """No runtime and limits tried started a container; the message lists each try and its error."""


Start = Callable[[Sequence[str]], str | None]  # podman's argv after "podman": None when it ran, else its error


def podman_start(podman: str = "podman") -> Start:
    """Runs ``podman ARGS``; None when it exits 0, else the last lines of what it said."""

    def start(args: Sequence[str]) -> str | None:
        try:
            done = subprocess.run([podman, *args], capture_output=True, text=True, timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"no answer in {START_TIMEOUT_S} s"
        except OSError as exc:  # no such binary, not executable
            return str(exc)
        if done.returncode == 0:
            return None
        said = (done.stderr or done.stdout).strip().splitlines()
        return " / ".join(said[-3:]) or f"exit status {done.returncode}"

    return start


def candidates(runtimes: Sequence[str], hard_nofile: int, hard_nproc: int) -> list[PodmanSetting]:
    """Each runtime with the host's hard limits first, then lower ones, never above them."""
    nofiles = _limits(hard_nofile, NOFILE_FALLBACKS)
    nprocs = _limits(hard_nproc, NPROC_FALLBACKS)
    return [PodmanSetting(r, nofile, nproc) for r in runtimes for nproc in nprocs for nofile in nofiles]


def _limits(hard: int, fallbacks: Sequence[int]) -> list[int]:
    return sorted({hard, *(f for f in fallbacks if f < hard)}, reverse=True)


def host_limits() -> tuple[int, int]:
    """This process's hard limits on open files and processes (unlimited: the first fallback's ten times)."""
    found = []
    for which, fallback in ((resource.RLIMIT_NOFILE, NOFILE_FALLBACKS), (resource.RLIMIT_NPROC, NPROC_FALLBACKS)):
        hard = resource.getrlimit(which)[1]
        found.append(fallback[0] * 10 if hard == resource.RLIM_INFINITY else hard)
    return found[0], found[1]


def installed_runtimes(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    return [r for r in RUNTIMES if which(r) or Path(f"/usr/sbin/{r}").exists()]


def choose(image: str, settings: Sequence[PodmanSetting], start: Start) -> PodmanSetting:
    """The first setting under which ``image`` starts; NoWorkingSetting naming every try's error."""
    tried = []
    for setting in settings:
        error = start(setting.start_args(image))
        if error is None:
            return setting
        tried.append(f"  {setting.runtime}, nofile {setting.nofile}, nproc {setting.nproc}: {error}")
    raise NoWorkingSetting(
        "no podman runtime and ulimits tried could start a container on this host:\n" + "\n".join(tried)
    )


def check_podman_starts(image: str, start: Start) -> None:
    """One plain start under podman's configuration; RuntimeError naming the fix when it fails."""
    error = start(["run", "--rm", "--network", "none", image, "true"])
    if error is not None:
        raise RuntimeError(
            f"podman cannot start a container on this host: {error}. Run `sudo tests/setup_machine.sh`, which "
            f"tries the runtimes and ulimits this host allows and writes the one that starts to {DROP_IN}; "
            f'by hand: `[engine] runtime = "runc"` where crun refuses the cgroup layout, and `[containers] '
            f'default_ulimits = ["nofile=N:N", "nproc=M:M"]` within `ulimit -Hn` and `ulimit -Hu` '
            f"(docs/running.md, harbor:podman)"
        )


async def preflight_podman(podman: str = "podman") -> None:
    """``--sandbox harbor:podman``'s check, once before any rollout: one container starts under podman's
    configuration (an image podman has, else the offline base image copied from Docker)."""
    if shutil.which(podman) is None:
        raise SandboxError(f"--sandbox harbor:podman needs `{podman}` on PATH: run `sudo tests/setup_machine.sh`")
    image = await asyncio.to_thread(stored_image, podman)
    if image is None and await image_id("docker", PROBE_IMAGE) is not None:
        image = await in_podman(PROBE_IMAGE)
    if image is None:
        raise SandboxError(
            f"--sandbox harbor:podman: podman has no image to check a start with, nor Docker {PROBE_IMAGE!r}: "
            f"run `sudo tests/setup_machine.sh` (or `bash docker/setup-daemon.sh`)"
        )
    try:
        await asyncio.to_thread(check_podman_starts, image, podman_start(podman))
    except RuntimeError as exc:
        raise SandboxError(f"--sandbox harbor:podman: {exc}") from None


def stored_image(podman: str = "podman") -> str | None:
    """An image in podman's store (its first, by name), or None when it has none."""
    done = subprocess.run(
        [podman, "images", "--noheading", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True
    )
    names = [n for n in done.stdout.split() if "<none>" not in n] if done.returncode == 0 else []
    return names[0] if names else None


def configure(
    image: str, start: Start, drop_in: Path = DROP_IN, runtimes: Sequence[str] | None = None
) -> PodmanSetting:
    """Find a working setting, write it as podman's default and prove a plain start works under it."""
    setting = choose(image, candidates(runtimes or installed_runtimes(), *host_limits()), start)
    drop_in.parent.mkdir(parents=True, exist_ok=True)
    drop_in.write_text(setting.config())
    check_podman_starts(image, start)
    return setting


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--image", required=True, help="an image in podman's store to start")
    parser.add_argument("--drop-in", type=Path, default=DROP_IN, help="the containers.conf drop-in to write")
    parser.add_argument("--podman", default="podman", help="the podman binary")
    args = parser.parse_args(argv)
    try:
        setting = configure(args.image, podman_start(args.podman), args.drop_in)
    except (NoWorkingSetting, RuntimeError) as exc:
        print(f"podman: {exc}", file=sys.stderr)
        return 1
    print(f"podman: runtime {setting.runtime}, nofile {setting.nofile}, nproc {setting.nproc} ({args.drop_in})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
