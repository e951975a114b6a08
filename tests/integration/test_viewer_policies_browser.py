"""The viewer's policies pages in headless Chromium: every policy the server knows with the version it
serves, and one policy's versions with their digests, engines, rewards and held-out pass@1, as the API
gives them, for policies recorded through the real gateway."""

from __future__ import annotations

import shutil

import httpx
import pytest

from harnessrl.server import BackgroundGateway, BackgroundServer
from store.database import sqlite_url
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.viewer_pages import browsing

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a system Chromium (apt-get install chromium)")


def record(url: str) -> None:
    """pi at v1 with two held-out rollouts of it (one passed), opencode at v2, ada bound to a live key's run."""
    client = httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=30)
    for policy, version in (("pi", 1), ("opencode", 1), ("opencode", 2)):
        body = {"policy": policy, "version": version, "path": f"/adapters/{policy}/v{version}"}
        assert client.post("/admin/adapters", json=body).status_code == 200
    for run, policy in (("pi-run", "pi"), ("oc-run", "opencode")):
        created = client.post("/api/rollouts", json={"run": run, "task": "t", "run_policy": policy})
        assert created.status_code == 201, created.text
    for task, reward in (("a", 1.0), ("b", 0.0)):
        created = client.post("/api/rollouts", json={"run": "held-out", "task": task, "policy": "pi@v1"})
        ended = {"status": "finished", "rewards": {"verifier": reward}}
        assert client.post(f"/api/rollouts/{created.json()['id']}/end", json=ended).status_code == 200


def test_the_policies_pages_show_each_policy_and_its_versions(tmp_path, migrated_sqlite_file):
    db = tmp_path / "harnessrl.db"
    shutil.copyfile(migrated_sqlite_file, db)
    with (
        BackgroundServer(create_fake_engine_app(FakeEngine(record_requests=False))) as fake,
        BackgroundGateway(gateway_settings(sqlite_url(db), fake.url)) as gateway,
    ):
        record(gateway.url)
        listed = http.get(f"{gateway.url}/api/policies", headers=ADMIN_HEADERS).json()
        pi = http.get(f"{gateway.url}/api/policies/pi", headers=ADMIN_HEADERS).json()
        with browsing(tmp_path) as browser:
            browser.goto_hash(gateway.url, "/runs")
            browser.click("[data-testid=policies-link]")
            page = browser.page
            rows = page.locator("[data-testid=policy-summary-row]")
            assert rows.evaluate_all("els => els.map(e => e.dataset.policy)") == [p["policy"] for p in listed]
            assert rows.evaluate_all("els => els.map(e => e.dataset.policy)") == ["opencode", "pi", "policy"]
            assert browser.texts("[data-testid=policy-current]") == ["v2", "v1", "base"]
            browser.click("[data-testid=policy-summary-row][data-policy=pi] [data-testid=policy-link]")
            versions = page.locator("[data-testid=version-row]")
            assert versions.evaluate_all("els => els.map(e => e.dataset.version)") == ["0", "1"]
            assert (
                browser.texts("[data-testid=version-pass1]")
                == ["–" if v["pass_at_1"] is None else f"{100 * v['pass_at_1']:.1f}%" for v in pi["versions"]]
                == ["–", "50.0%"]
            )
            assert "pi-v1" in versions.nth(1).inner_text()
            page.screenshot(path=str(tmp_path / "policies.png"), full_page=True)
