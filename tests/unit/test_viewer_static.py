"""The viewer's static files at /ui: what is served, with which types and headers (the browser tests
in tests/integration/test_viewer_browser.py check the pages themselves)."""

from __future__ import annotations

import re

from gateway.ui import STATIC_DIR, static_files


async def test_ui_redirects_to_the_page_and_serves_it_with_a_strict_policy(gateway):
    response = await gateway.http.get("/ui")
    assert response.status_code == 307 and response.headers["location"] == "ui/"
    page = await gateway.http.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "connect-src 'self'" in policy


async def test_every_module_is_served_as_javascript(gateway):
    modules = [path for path in static_files() if path.endswith(".js")]
    assert "js/app.js" in modules
    for path in modules:
        response = await gateway.http.get(f"/ui/{path}")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/javascript")


async def test_only_the_viewer_files_are_reachable(gateway):
    for path in ("/ui/../gateway/app.py", "/ui/%2e%2e/gateway/app.py", "/ui/nope.js", "/ui/__init__.py"):
        assert (await gateway.http.get(path)).status_code == 404, path


def test_imports_name_files_that_exist():
    """No build step means no bundler to catch a misspelt import: check the relative imports here."""
    files = static_files()
    for path, file in files.items():
        if not path.endswith(".js"):
            continue
        folder = file.parent.relative_to(STATIC_DIR)
        for target in re.findall(r'from "(\.{1,2}/[^"]+)"', file.read_text()):
            resolved = (STATIC_DIR / folder / target).resolve().relative_to(STATIC_DIR.resolve()).as_posix()
            assert resolved in files, f"{path} imports missing {target}"


def test_the_page_loads_nothing_from_elsewhere():
    for path, file in static_files().items():
        text = file.read_text().replace("http://www.w3.org/2000/svg", "")  # a namespace name, never fetched
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), path


def test_the_one_fetch_helper_sends_the_admin_key_kept_for_this_tab():
    """The page's data needs the admin key: api.js is the only module that fetches, and it sends the
    key kept in sessionStorage, which a `#key=` fragment fills (the browser test runs it for real)."""
    sources = {path: file.read_text() for path, file in static_files().items() if path.endswith(".js")}
    assert [path for path, text in sources.items() if re.search(r"\bfetch\(|XMLHttpRequest|EventSource", text)] == [
        "js/api.js"
    ]
    api = sources["js/api.js"]
    assert 'headers["x-admin-key"] = key' in api and "sessionStorage.getItem(KEY_ITEM)" in api
    assert "location.hash.match(/^#key=" in api and "history.replaceState" in api  # the key leaves the URL
    assert not any("localStorage" in text for text in sources.values())  # kept for this tab only
    assert "takeKeyFromUrl();\nrender();" in sources["js/app.js"] and "keyForm(error)" in sources["js/app.js"]
