"""docs/hooks/post-commit installed in a repository as its user would, and a commit that runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.builders import ADMIN_HEADERS

HOOK = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "post-commit"


def commit_with_the_hook(repo: Path, gateway_url: str, user: str = "ada") -> None:
    """A repository with docs/hooks/post-commit installed as its user would, and one commit in it."""
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=ada", "-c", "user.email=ada@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    shutil.copy(HOOK, repo / ".git" / "hooks" / "post-commit")
    (repo / "done.txt").write_text("work\n")  # what the tests (HARNESSRL_TEST_COMMAND) look for
    env = {
        **os.environ,
        "HARNESSRL_USER": user,
        "HARNESSRL_TEST_COMMAND": "test -f done.txt",
        "HARNESSRL_GATEWAY": gateway_url,
        "HARNESSRL_ADMIN_KEY": ADMIN_HEADERS["x-admin-key"],
        "HARNESSRL": f"{sys.executable} -m harnessrl.cli",
    }
    subprocess.run([*git, "add", "."], check=True)
    done = subprocess.run([*git, "commit", "-q", "-m", "work"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "reward 1.0" in done.stderr + done.stdout, done.stderr + done.stdout
