"""The trajectory viewer (/ui) in headless Chromium, against a run recorded through the real gateway.

The run is made the way agents make one: rollouts created over REST, multi-turn tool-calling chats
through the OpenAI endpoint on the fake engine (a title side call, a fork from a re-rendered tool
call), rewards and ends over REST; the learner's steps go into the store as the learner writes
them. The browser then clicks run -> group -> rollout -> call, and every number on screen is
checked against the store's rows (read with a plain SQLAlchemy engine, not through the API).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harnessrl.server import BackgroundGateway, BackgroundServer
from store.arrays import deltas_array, pack_deltas, unpack_ids, unpack_logprobs
from store.database import sqlite_url
from store.records import TokenRole
from store.roles import ROLE_NAMES
from store.tables import Call, Group, Rollout, Run
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.fake_tokens import BYTE_OFFSET
from tests.viewer_pages import (
    HOSTILE,
    MANY_ROLLOUTS,
    MANY_RUN,
    RUN,
    STEPS,
    Browser,
    Recorded,
    browsing,
    byte_level_chars,
    check_runs_page,
    check_token_view,
    earlier_logprobs,
    mask_sum,
    prompt_roles_written,
    record_run,
    reward_text,
    viewer_script,
    write_mismatch,
    write_steps,
)

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs a system Chromium (apt-get install chromium); no browser is downloaded"
)


@pytest.fixture(scope="module")
def fake_tokenizer_dir(tmp_path_factory) -> Path:
    """A tokenizer.json for the fake engine's ids (one per UTF-8 byte, after three specials).

    With it the gateway decodes what the fake engine sampled back to the very text, so the viewer's
    pieces and texts can be checked exactly (a real model's tokenizer would decode them to noise).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    vocab.update({char: byte + BYTE_OFFSET for byte, char in byte_level_chars().items()})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(s, special=True) for s in specials])
    folder = tmp_path_factory.mktemp("fake-tokenizer")
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, migrated_sqlite_file, fake_tokenizer_dir) -> Iterator[Recorded]:
    db_path = tmp_path_factory.mktemp("viewer") / "harnessrl.db"
    shutil.copyfile(migrated_sqlite_file, db_path)
    engine = FakeEngine(script=viewer_script(), record_requests=False)
    with BackgroundServer(create_fake_engine_app(engine)) as fake:
        settings = gateway_settings(sqlite_url(db_path), fake.url, model_dir=str(fake_tokenizer_dir))
        with BackgroundGateway(settings) as gateway:
            weather = record_run(gateway.url)
            write_steps(db_path, RUN)
            yield Recorded(gateway.url, db_path, fake.url, weather)


@pytest.fixture(scope="module")
def db(recorded) -> Iterator[Session]:
    """The store, read directly: what the viewer shows is checked against these rows."""
    engine = create_engine(f"sqlite:///{recorded.db_path}")
    with Session(engine) as session:
        yield session
    engine.dispose()


@pytest.fixture
def browser(tmp_path) -> Iterator[Browser]:
    with browsing(tmp_path) as view:
        yield view


def test_run_group_rollout_call_by_clicking(recorded, db, browser):
    run_id = db.scalars(select(Run.id).where(Run.name == RUN)).one()
    rollouts = db.scalars(select(Rollout).where(Rollout.run_id == run_id).order_by(Rollout.id)).all()
    groups = db.scalars(select(Group).where(Group.run_id == run_id).order_by(Group.id)).all()
    page = browser.page

    browser.goto_hash(recorded.url, "/runs")
    check_runs_page(browser, db)
    browser.shot("1-runs")
    browser.click(f"[data-testid=run-row][data-run={RUN}] [data-testid=run-link]")

    # Run page: summary, learner charts, groups with their rewards side by side.
    assert browser.texts("[data-testid=stat-rollouts]") == [str(len(rollouts))]
    by_status = dict(
        zip(
            browser.attrs("[data-testid=rollouts-by-status] .count", "data-status"),
            browser.texts("[data-testid=rollouts-by-status] .count"),
        )
    )
    for status in {r.status for r in rollouts}:
        assert by_status[status].split()[-1] == str(sum(r.status == status for r in rollouts)), by_status
    assert browser.texts("[data-testid=stat-learner-steps]") == [str(STEPS)]
    # Capture health: a row per harness that made calls, the forks those of its main-loop calls.
    run_calls = db.scalars(select(Call).join(Rollout, Rollout.id == Call.rollout_id).where(Rollout.run_id == run_id))
    run_calls = list(run_calls)
    harness_of = {r.id: (r.meta or {}).get("harness") or "" for r in rollouts}
    assert sorted(browser.attrs("[data-testid=health-row]", "data-harness")) == sorted(
        {harness_of[c.rollout_id] for c in run_calls}
    )
    forks = sum(c.fork_of is not None and not c.tags for c in run_calls)
    assert sum(int(t) for t in browser.texts("[data-testid=capture-health] [data-testid=forks]")) == forks
    alarmed = [step for step in range(1, STEPS + 1) if 0.03 * step > 0.1]
    banner = browser.texts("[data-testid=mismatch-banner]")[0]
    assert f"at {len(alarmed)} of {STEPS} steps" in banner and f"up to {0.03 * STEPS:g} nats" in banner
    charted = (("reward_mean", STEPS), ("loss", STEPS), ("kl", STEPS), ("mismatch_mean_abs", STEPS))
    for key, points in (*charted, ("swap_time_s", (STEPS + 1) // 2)):
        chart = page.locator(f"svg[data-testid=chart][data-key={key}]")
        assert chart.get_attribute("data-points") == str(points)
        assert chart.locator("[data-testid=chart-point]").count() == points
    calls = db.scalars(select(Call).join(Rollout, Rollout.id == Call.rollout_id).where(Rollout.run_id == run_id)).all()
    pinned = {
        r.id: min(c.policy_version for c in calls if c.rollout_id == r.id)
        for r in rollouts
        if any(c.rollout_id == r.id for c in calls)
    }
    by_version = page.locator("svg[data-testid=chart][data-key='mean reward']")  # reward per policy version
    assert by_version.get_attribute("data-points") == str(len(set(pinned.values())))
    assert page.locator("[data-testid=group-row]").count() == len(groups)
    for group in groups:
        members = [r for r in rollouts if r.group_id == group.id]
        row = page.locator(f"[data-testid=group-row][data-group-id='{group.id}']")
        assert row.get_attribute("data-status") == group.status
        cells = row.locator("[data-testid=reward-cell]")
        assert cells.evaluate_all("els => els.map(e => +e.dataset.rolloutId)") == [r.id for r in members]
        for cell, member in zip(cells.all_inner_texts(), members):
            assert reward_text(member.reward) in cell or member.status == "running"
    browser.shot("2-run")

    weather = next(r for r in rollouts if r.id == recorded.weather_rollout)
    browser.click(f"[data-testid=group-row][data-group-id='{weather.group_id}'] [data-testid=group-link]")

    # Group page: its rollouts, nothing else.
    members = [r for r in rollouts if r.group_id == weather.group_id]
    assert browser.attrs("[data-testid=rollout-row]", "data-rollout-id") == [str(r.id) for r in members]
    assert browser.attrs("[data-testid=rollout-row]", "data-status") == [r.status for r in members]
    browser.shot("3-group")
    browser.click(f"[data-testid=rollout-row][data-rollout-id='{weather.id}'] [data-testid=rollout-link]")

    # Rollout page: outcome, conversation, calls with the side call's tag and the fork.
    calls = {c.id: c for c in db.scalars(select(Call).where(Call.rollout_id == weather.id).order_by(Call.id))}
    assert browser.texts("[data-testid=rollout-status]") == [weather.status]
    assert browser.texts("[data-testid=rollout-reward]") == [reward_text(weather.reward)]
    components = browser.texts("[data-testid=reward-components] .component")
    assert components == [f"{name} = {reward_text(value)}" for name, value in weather.rewards.items()]
    assert browser.texts("[data-testid=judge-model]") == ["hosted_vllm/judge"]
    assert browser.texts("[data-testid=judge-score]") == ["0.75"]
    assert browser.texts("[data-testid=judge-tokens]") == [
        "812 prompt + 40 completion (one call for 4 rollouts of the group)"
    ]
    assert browser.texts("[data-testid=judge-cost]") == ["unknown to litellm"]
    assert HOSTILE in browser.texts("[data-testid=judge-reasons]")[0]  # as text, never run
    assert browser.attrs("[data-testid=call-row]", "data-call-id") == [str(i) for i in calls]
    [side] = [c for c in calls.values() if c.tags]
    assert browser.texts(f"[data-testid=call-row][data-call-id='{side.id}'] .tag") == side.tags == ["title"]
    [fork] = [c for c in calls.values() if c.fork_of is not None]
    fork_text = browser.texts(f"[data-testid=call-row][data-call-id='{fork.id}'] [data-testid=call-fork]")
    assert fork_text == [f"fork of #{fork.fork_of} · {fork.drift_tokens} drift"] and fork.drift_tokens > 0
    roles = browser.attrs("[data-testid=message]", "data-role")
    assert roles[:4] == ["user", "assistant", "tool", "assistant"] and "tool" in roles
    assert browser.attrs("[data-testid=tool-call]", "data-name") == ["get_weather"]
    assert '"city": "Paris"' in browser.texts("[data-testid=tool-arguments]")[0]
    assert HOSTILE in browser.texts("[data-testid=message-content]")[-1]  # shown as text ...
    assert page.evaluate("window.__pwned") is None  # ... and never run
    assert page.locator("[data-testid=conversation] img, [data-testid=conversation] script").count() == 0
    browser.shot("4-rollout")

    # Call page: the last turn extends the fork's answer, so its prompt holds sampled tokens.
    leaf = max(c.id for c in calls.values() if not c.tags and c.parent_id is not None)
    assert f"#/calls/{leaf}" in browser.attrs("[data-testid=message-call-link]", "href")  # the answer's call
    browser.click(f"[data-testid=call-row][data-call-id='{leaf}'] [data-testid=call-link]")
    check_token_view(browser, calls[leaf], calls)
    assert mask_sum(calls[leaf], calls) > 0 and len(set(earlier_logprobs(calls[leaf], calls))) > 1
    browser.shot("5-call")

    browser.click("[data-testid=parent-link]")  # up to the fork
    assert browser.texts("[data-testid=call-fork]") == [f"fork of #{fork.fork_of} · {fork.drift_tokens} drift tokens"]
    check_token_view(browser, fork, calls)
    browser.shot("6-fork-call")


def test_listings_page_with_more(recorded, browser):
    browser.goto_hash(recorded.url, "/runs")
    browser.page.locator("[data-testid=run-filters] [data-testid=filter-name]").fill("many")
    browser.page.locator("[data-testid=run-filters] [data-testid=filter-name]").press("Enter")
    browser.page.wait_for_function("() => document.querySelectorAll('[data-testid=run-row]').length === 1")
    assert browser.attrs("[data-testid=run-row]", "data-run") == [MANY_RUN]
    browser.click("[data-testid=run-link]")
    rows = browser.page.locator("[data-testid=rollouts-table] [data-testid=rollout-row]")
    assert rows.count() == 50
    browser.page.locator("[data-testid=rollouts-table] ~ [data-testid=more]").click()
    browser.page.wait_for_function(
        f"() => document.querySelectorAll("
        f"'[data-testid=rollouts-table] [data-testid=rollout-row]').length === {MANY_ROLLOUTS}"
    )
    assert browser.page.locator("[data-testid=rollouts-table] ~ [data-testid=more]").is_hidden()
    # A filter re-queries from the first page: none of these rollouts finished.
    browser.page.locator("[data-testid=rollout-filters] [data-testid=filter-status]").select_option("finished")
    browser.page.wait_for_function(
        "() => document.querySelector('[data-testid=rollouts-table]').dataset.state === 'ready'"
    )
    assert rows.count() == 0
    assert "No rollouts match." in browser.page.locator("[data-testid=rollouts-table] ~ p").inner_text()


def test_unknown_things_show_an_error(recorded, browser):
    browser.goto_hash(recorded.url, "/rollouts/999999")
    assert "not found" in browser.page.locator("[data-testid=error]").inner_text()
    # Chromium logs every failed fetch to the console: the 404s asked for here are the only errors allowed.
    # The view fetches the rollout and its conversation at once and shows the first failure: both come.
    browser.wait_for_errors(2)
    assert all("status of 404" in e for e in browser.errors), browser.errors
    browser.errors.clear()
    browser.goto_hash(recorded.url, "/nowhere")
    assert "no page" in browser.page.locator("[data-testid=error]").inner_text()


def test_filters_query_the_store(recorded, db, browser):
    run_id = db.scalars(select(Run.id).where(Run.name == RUN)).one()
    rollouts = db.scalars(select(Rollout).where(Rollout.run_id == run_id).order_by(Rollout.id)).all()
    with_calls = set(db.scalars(select(Call.rollout_id).where(Call.policy_version == 0)))
    browser.goto_hash(recorded.url, f"/runs/{RUN}")

    def shown(filters: str, name: str, value: str, table: str, row: str, key: str) -> list[str]:
        """Set one filter, read the rows it leaves, then clear it again."""
        field = browser.page.locator(f"[data-testid={filters}] [data-testid=filter-{name}]")
        is_select = field.evaluate("e => e.tagName") == "SELECT"

        def set_to(text: str) -> None:
            if is_select:
                field.select_option(text)
            else:
                field.fill(text)
                field.press("Tab")  # a text input reports its change when left
            browser.page.wait_for_function(
                f"() => document.querySelector('[data-testid={table}]').dataset.state === 'ready'"
            )

        set_to(value)
        values = browser.attrs(f"[data-testid={table}] [data-testid={row}]", key)
        set_to("")
        return values

    def ids(rows) -> list[str]:
        return [str(r.id) for r in rows]

    rollout_filter = dict(filters="rollout-filters", table="rollouts-table", row="rollout-row", key="data-rollout-id")
    assert shown(name="status", value="failed", **rollout_filter) == ids(r for r in rollouts if r.status == "failed")
    assert shown(name="harness", value="opencode", **rollout_filter) == ids(
        r for r in rollouts if r.meta.get("harness") == "opencode"
    )
    assert shown(name="reward_min", value="0.5", **rollout_filter) == ids(
        r for r in rollouts if r.reward is not None and r.reward >= 0.5
    )
    assert shown(name="policy_version", value="0", **rollout_filter) == ids(r for r in rollouts if r.id in with_calls)
    groups = db.scalars(select(Group).where(Group.run_id == run_id, Group.status == "open")).all()
    assert shown(
        filters="group-filters", name="status", value="open", table="groups-table", row="group-row", key="data-group-id"
    ) == ids(groups)


def test_call_without_a_tokenizer_shows_token_ids(recorded, db, browser):
    settings = gateway_settings(sqlite_url(recorded.db_path), recorded.engine_url)
    call = db.scalars(select(Call).where(Call.rollout_id == recorded.weather_rollout).order_by(Call.id)).first()
    with BackgroundGateway(settings) as bare:  # no model_dir, and the fake engine names no model folder
        browser.goto_hash(bare.url, f"/calls/{call.id}")
        ids = unpack_ids(call.prompt_ids) + unpack_ids(call.output_ids)
        assert browser.texts("[data-testid=token]") == [f"[{i}]" for i in ids]
        assert "no tokenizer" in browser.page.locator(".legend .warn").inner_text()
        assert browser.texts("[data-testid=call-tags] .tag") == call.tags == ["title"]
        browser.shot("call-without-tokenizer")


def test_the_viewer_asks_for_the_key_once_and_keeps_it_out_of_the_address_bar(recorded, browser):
    page = browser.page
    page.goto(f"{recorded.url}/ui/#/runs/{RUN}")
    browser.ready()
    assert page.locator("[data-testid=admin-key-form]").count() == 1  # no key yet: no data, a prompt
    assert not [u for u in browser.urls if "/api/" in u]
    page.locator("[data-testid=admin-key-input]").fill(TEST_ADMIN_KEY)
    page.evaluate("() => { document.getElementById('app').dataset.state = 'stale'; }")
    page.locator("[data-testid=admin-key-form] button").click()
    browser.ready()
    assert page.locator("[data-testid=admin-key-form]").count() == 0 and RUN in page.inner_text("main")
    browser.goto_hash(recorded.url, "/runs")  # a printed URL: the key moves to sessionStorage
    assert TEST_ADMIN_KEY not in page.url and page.url.endswith("#/runs")
    page.reload()
    browser.ready()  # the tab keeps its key
    assert page.locator("[data-testid=admin-key-form]").count() == 0
    assert page.evaluate("() => sessionStorage.getItem('harnessrl.adminKey')") == TEST_ADMIN_KEY


def test_a_trained_calls_mismatch_is_a_heatmap_that_shows_both_log_probs(recorded, db, browser):
    calls = db.scalars(select(Call).where(Call.rollout_id == recorded.weather_rollout).order_by(Call.id)).all()
    call = max(calls, key=lambda c: c.num_output_tokens)  # the tool call: the longest output
    n = call.num_output_tokens
    # small differences, one large one, and tokens not compared (sampled by another version)
    deltas = np.array([np.nan if i % 7 == 3 else (0.4 if i == 5 else 0.004 * (i % 5)) for i in range(n)])
    write_mismatch(recorded.db_path, call, deltas)

    browser.goto_hash(recorded.url, f"/calls/{call.id}")
    stored = deltas_array(pack_deltas(deltas))  # float16, as the store keeps them
    shown = browser.attrs("[data-testid=mismatch-token]", "data-delta")
    assert len(shown) == n
    for value, expected in zip(shown, stored, strict=True):
        assert (value is None) if np.isnan(expected) else float(value) == pytest.approx(float(expected), abs=1e-6)
    sampler = unpack_logprobs(call.output_logprobs)
    titles = browser.attrs("[data-testid=mismatch-token]", "title")
    four = lambda x: f"{x:.4f}".rstrip("0").rstrip(".")  # noqa: E731 - the viewer's fmtNum(x, 4)
    both = f"sampler {four(sampler[5])} · learner {four(sampler[5] + stored[5])} · Δ {four(stored[5])}"
    assert titles[5].endswith(both), titles[5]
    assert "not compared" in titles[3]
    colours = browser.attrs("[data-testid=mismatch-token]", "style")
    assert colours[5] != colours[0] and colours[3] is None  # red for 0.4, green for 0, none uncompared
    mean = float(browser.texts("[data-testid=mismatch-mean]")[0].split()[0])
    assert mean == pytest.approx(float(np.abs(deltas[np.isfinite(deltas)]).mean()), abs=1e-5)
    browser.shot("call-mismatch")


def test_a_calls_tool_result_tokens_are_shaded_and_every_role_is_marked(recorded, db, browser):
    root = db.scalars(
        select(Call).where(Call.rollout_id == recorded.weather_rollout, Call.prompt_offset == 0).order_by(Call.id)
    ).first()
    n = root.num_prompt_tokens
    order = [TokenRole.SYSTEM, TokenRole.USER, TokenRole.TOOL, TokenRole.TEMPLATE, TokenRole.ASSISTANT]
    roles = bytes(order[i * len(order) // n] for i in range(n))  # five stretches over the whole prompt
    with prompt_roles_written(recorded.db_path, root.id, roles):
        browser.goto_hash(recorded.url, f"/calls/{root.id}")
        assert browser.attrs("[data-testid=token].prompt", "data-role") == [ROLE_NAMES[r] for r in roles]
        tool = browser.page.locator("[data-testid=token].prompt.tr-tool")
        assert tool.count() == roles.count(TokenRole.TOOL) > 0
        shade = tool.first.evaluate("e => getComputedStyle(e).backgroundColor")
        user = browser.page.locator("[data-testid=token].prompt.tr-user").first
        assert shade != user.evaluate("e => getComputedStyle(e).backgroundColor")  # tool results stand out
        assert "role: tool result" in tool.first.get_attribute("title")
        assert browser.page.locator(".legend .tr-tool").count() == 1  # the legend names every role
        assert browser.page.locator("[data-testid=roles-unknown]").count() == 0
        browser.shot("call-roles")
