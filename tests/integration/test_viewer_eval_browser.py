"""The viewer's evaluation card in headless Chromium: each policy's numbers as the run summary gives them,
and each task's passes, for a run of pinned rollouts recorded through the real gateway."""

from __future__ import annotations

import shutil

import httpx
import pytest

from harnessrl.server import BackgroundGateway, BackgroundServer
from store.database import sqlite_url
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app

playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (in the dev extras)")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a system Chromium (apt-get install chromium)")

# (policy, task, status, verifier reward)
ROLLOUTS = [
    ("base", "a", "finished", 1.0),
    ("base", "a", "finished", 0.0),
    ("base", "b", "failed", None),
    ("base", "b", "finished", 0.0),
    ("policy-v1", "a", "finished", 1.0),
    ("policy-v1", "a", "finished", 1.0),
    ("policy-v1", "b", "finished", 1.0),
    ("policy-v1", "b", "finished", 0.0),
]


def record(url: str) -> None:
    http = httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=30)
    assert http.post("/admin/adapters", json={"version": 1, "path": "/adapters/v1"}).status_code == 200
    for policy, task, status, reward in ROLLOUTS:
        created = http.post("/api/rollouts", json={"run": "eval", "task": task, "group": policy, "policy": policy})
        assert created.status_code == 201, created.text
        rewards = {} if reward is None else {"verifier": reward}
        ended = http.post(f"/api/rollouts/{created.json()['id']}/end", json={"status": status, "rewards": rewards})
        assert ended.status_code == 200, ended.text


def test_the_run_page_shows_each_policys_results_and_each_tasks_passes(tmp_path, migrated_sqlite_file):
    db = tmp_path / "harnessrl.db"
    shutil.copyfile(migrated_sqlite_file, db)
    with (
        BackgroundServer(create_fake_engine_app(FakeEngine(record_requests=False))) as fake,
        BackgroundGateway(gateway_settings(sqlite_url(db), fake.url)) as gateway,
    ):
        record(gateway.url)
        summary = http.get(f"{gateway.url}/api/runs/eval/summary", headers=ADMIN_HEADERS).json()
        with playwright_api.sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            try:
                page = chromium.new_page(viewport={"width": 1280, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{gateway.url}/ui/#key={TEST_ADMIN_KEY}&/runs/eval")
                page.wait_for_function("() => document.getElementById('app').dataset.state === 'ready'")
                rows = page.locator("[data-testid=policy-row]")
                assert rows.evaluate_all("els => els.map(e => e.dataset.policy)") == ["base", "policy-v1"]
                assert (
                    page.locator("[data-testid=pass-at-1]").all_inner_texts()
                    == [f"{100 * p['pass_at_1']:.1f}%" for p in summary["policies"]]
                    == ["25.0%", "75.0%"]
                )
                assert page.locator("[data-testid=pass-at-k]").all_inner_texts() == [
                    f"{100 * p['pass_at_k']:.1f}%" for p in summary["policies"]
                ]
                cells = [row.split("\t") for row in page.locator("[data-testid=policy-task-row]").all_inner_texts()]
                assert cells == [["a", "1/2", "2/2"], ["b", "0/2", "1/2"]]
                assert rows.first.inner_text().split("\t")[-1] == "1"  # base's one failure
                page.screenshot(path=str(tmp_path / "eval_card.png"), full_page=True)
                assert errors == []
            finally:
                chromium.close()
