"""Under CI=true a skipped test fails the run (tests/conftest.py), so a green CI means every test ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\ndef test_needs_a_part():\n    pytest.skip('part missing')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci else {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_one.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_fails_the_run_under_ci(tmp_path):
    result = run_pytest(tmp_path, "true")
    assert result.returncode == 1
    assert "skipped tests count as failures" in result.stdout


def test_a_skip_is_only_a_skip_elsewhere(tmp_path):
    assert run_pytest(tmp_path, None).returncode == 0


def test_no_two_test_modules_share_a_name():
    # The tiers are folders, not packages: pytest imports each test file by its basename, and a second
    # file of the same name stops the whole collection ("import file mismatch").
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
