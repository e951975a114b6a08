"""Both installs resolve: ``pip install --dry-run`` of the CPU install (``.[cpu,dev]`` with
constraints/cpu.txt) and of the GPU install (``.[gpu]`` with constraints/gpu.txt), each with
``--ignore-installed`` so the current environment does not matter; nothing is installed. Needs PyPI.

Run: ``.venv/bin/python tests/install_check.py [cpu|gpu ...]`` (``make check-install``); exits 1 naming the
install that does not resolve. tests/integration/test_install.py runs the same on every CI run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLS = {"cpu": ".[cpu,dev]", "gpu": ".[gpu]"}


@dataclass(frozen=True)
class Resolution:
    install: str
    ok: bool
    versions: dict[str, str]  # package name (lower case) -> resolved version
    error: str


def pins(install: str) -> dict[str, str]:
    """The exact pins of constraints/<install>.txt."""
    out = {}
    for line in (ROOT / "constraints" / f"{install}.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[name.strip().lower()] = version.strip()
    return out


def resolve(install: str, timeout_s: float = 900.0) -> Resolution:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        argv = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "-c",
            f"constraints/{install}.txt",
            INSTALLS[install],
        ]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            return Resolution(install, False, {}, done.stderr[-3000:])
        data = json.loads(report.read_text())
    versions = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in data["install"]}
    return Resolution(install, True, versions, "")


def main() -> int:
    failed = 0
    for install in sys.argv[1:] or list(INSTALLS):
        result = resolve(install)
        if not result.ok:
            print(f"{install}: pip cannot resolve {INSTALLS[install]} -c constraints/{install}.txt:\n{result.error}")
            failed += 1
            continue
        wrong = {
            n: (v, result.versions.get(n))
            for n, v in pins(install).items()
            if result.versions.get(n, "").split("+")[0] != v
        }
        shown = ", ".join(f"{n} {result.versions.get(n)}" for n in pins(install))
        print(
            f"{install}: resolves ({len(result.versions)} packages): {shown}"
            + (f"; NOT the pins: {wrong}" if wrong else "")
        )
        failed += bool(wrong)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
