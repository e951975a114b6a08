"""Under CI=true a skipped test fails the run (tests/conftest.py), so a green CI means every test ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_one.py").write_text("import pytest\n\ndef test_needs_a_part():\n    pytest.skip('part missing')\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_one.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_skip_fails_the_run_under_ci(tmp_path):
    result = run_pytest(tmp_path, "true")
    assert result.returncode == 1
    assert "skipped tests count as failures" in result.stdout


def test_a_skip_is_only_a_skip_elsewhere(tmp_path):
    assert run_pytest(tmp_path, None).returncode == 0
