"""The viewer's live page (#/live) in headless Chromium: a run's live sessions per user, rewarded and
redacted (the kind of secret shown, never the secret), and what serves new sessions; made through a real
gateway by the OpenAI SDK with a live key, scanned and scored with the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from openai import OpenAI

from harnessrl.server import BackgroundGateway, BackgroundServer
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.viewer_pages import Browser, browsing

playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (in the dev extras)")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a system Chromium (apt-get install chromium)")
PLANTED = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example access key id


def cli(*args: str) -> str:
    """The command's output (stdout: what it prints for scripts, as the key; messages go to stderr)."""
    env = {**os.environ, "HARNESSRL_ADMIN_KEY": ADMIN_HEADERS["x-admin-key"]}
    done = subprocess.run(
        [sys.executable, "-m", "harnessrl.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def browser(tmp_path) -> Iterator[Browser]:
    with browsing(tmp_path) as view:
        yield view


def test_the_live_page_shows_sessions_per_user_and_what_was_redacted_never_the_secret(sqlite_db, browser):
    db = ["--database-url", sqlite_db]
    key = cli("keys", "create", "--user", "ada", *db).strip().splitlines()[-1]
    with BackgroundServer(create_fake_engine_app(FakeEngine())) as fake:
        with BackgroundGateway(gateway_settings(sqlite_db, fake.url)) as gateway:
            client = OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
            for session, text in (
                ("one", f"aws_access_key_id = {PLANTED}"),
                ("two", "list the files"),
                ("three", "hi"),
            ):
                client.chat.completions.create(
                    model="policy",
                    messages=[{"role": "user", "content": text}],
                    extra_headers={"x-harnessrl-session": session},
                )
            cli("keys", "scan", *db)
            cli("feedback", "1", "--user", "ada", "--gateway", gateway.url)

            browser.goto_hash(gateway.url, "/live")

            [row] = browser.texts("[data-testid=live-row]")
            cells = row.split("\t")
            assert cells[:4] == ["ada", "3", "1", "1"], cells  # sessions, running, rewarded
            assert browser.texts("[data-testid=live-redacted]") == ["1 (AWS Access Key: 1)"]
            assert browser.texts("[data-testid=live-serving]") == ["New sessions are served base."]
            assert PLANTED not in browser.page.content()
            browser.shot("live")
