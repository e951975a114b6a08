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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from openai import OpenAI
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harnessrl.server import BackgroundGateway, BackgroundServer
from store import prompt_delta
from store.arrays import deltas_array, pack_deltas, unpack_ids, unpack_logprobs
from store.database import sqlite_url
from store.tables import Call, CallMismatch, Group, LearnerStep, Rollout, Run
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, WEATHER_TOOL, gateway_settings
from tests.fake_engine import BYTE_OFFSET, FakeEngine, FakeReply, create_fake_engine_app, decode

playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (in the dev extras)")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs a system Chromium (apt-get install chromium); no browser is downloaded"
)

RUN = "viewer-run"
MANY_RUN = "viewer-many"  # rollouts enough to need a second page
MANY_ROLLOUTS = 60  # the viewer pages by 50
# Agent output is untrusted: this must show up as text and never run.
HOSTILE = 'You are welcome. <img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
STEPS = 5
# The judge's verdict as the runner stores it (harnesses.judge.Judgement.detail); its reasons may quote the agent.
JUDGE_DETAIL = {
    "score": 0.75,
    "reasons": f"Polite; the agent wrote {HOSTILE}",
    "model": "hosted_vllm/judge",
    "prompt_tokens": 812,
    "completion_tokens": 40,
    "cost_usd": None,
    "latency_s": 1.5,
    "attempts": 1,
    "cached": False,
    "shared_by": 4,
    "abstained": False,
}
VIEWPORT = {"width": 1280, "height": 800}


@dataclass
class Recorded:
    url: str
    db_path: Path
    engine_url: str
    weather_rollout: int  # the multi-turn one: side call, fork, a linked turn, hostile output


def _script() -> list[FakeReply]:
    return [
        FakeReply(content="Weather in Paris"),  # the title side call
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="Sunny in Paris."),
        FakeReply(content=HOSTILE),
    ]


def _weather_rollout(client: OpenAI) -> None:
    """Title call, tool call, tool result (re-rendered: a fork), then one more linked turn."""
    client.chat.completions.create(
        model="policy",
        messages=[
            {"role": "system", "content": "You are a title generator. Output only a short title."},
            {"role": "user", "content": "what is the weather in Paris?"},
        ],
    )
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    messages += [
        {"role": "assistant", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"},
    ]
    second = client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])
    messages += [
        {"role": "assistant", "content": second.choices[0].message.content},
        {"role": "user", "content": "Thanks!"},
    ]
    client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])


def _record_run(url: str) -> int:
    http = httpx.Client(base_url=url, timeout=30, headers=ADMIN_HEADERS)

    def rollout(task: str, group: str, run: str = RUN, harness: str = "builtin") -> dict:
        response = http.post(
            "/api/rollouts",
            json={"run": run, "task": task, "group": group, "group_size": 2, "meta": {"harness": harness}},
        )
        assert response.status_code == 201, response.text
        return response.json()

    def chat(token: str, text: str) -> None:
        OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": text}]
        )

    def finish(
        rollout_id: int, status: str = "finished", error: str | None = None, details: dict | None = None, **rewards
    ) -> None:
        response = http.post(
            f"/api/rollouts/{rollout_id}/end",
            json={"status": status, "error": error, "rewards": rewards, "reward_details": details or {}},
        )
        assert response.status_code == 200, response.text

    weather = rollout("weather", "g-weather")
    _weather_rollout(OpenAI(base_url=f"{url}/v1", api_key=weather["token"], max_retries=0))
    finish(weather["id"], correct=1.0, format=0.5, judge=0.75, details={"judge": JUDGE_DETAIL})
    other = rollout("weather", "g-weather", harness="opencode")
    chat(other["token"], "What is the weather in London?")
    finish(other["id"], correct=0.0)
    for reward in (1.0, 0.25):
        r = rollout("arith", "g-arith")
        chat(r["token"], "2 + 2 = ?")
        finish(r["id"], correct=reward)
    failed = rollout("arith", "g-arith-2")
    chat(failed["token"], "3 + 4 = ?")
    finish(failed["id"], status="failed", error="sandbox timeout after 600 s")
    rollout("arith", "g-arith-2")  # still running: its group stays open
    for i in range(MANY_ROLLOUTS):
        rollout(f"task-{i % 3}", f"g-{i // 2}", run=MANY_RUN)
    return weather["id"]


def _write_steps(db_path: Path, run: str) -> None:
    """Learner steps as learner.metrics.MetricsSink stores them (one JSON row per step)."""
    engine = create_engine(f"sqlite:///{db_path}")
    try:
        with Session(engine) as session, session.begin():
            run_id = session.scalars(select(Run.id).where(Run.name == run)).one()
            for step in range(1, STEPS + 1):
                session.add(
                    LearnerStep(
                        run_id=run_id,
                        step=step,
                        metrics={
                            "step": step,
                            "version": step,
                            "reward_mean": 0.2 + 0.15 * step,
                            "loss": 1.0 / step,
                            "kl": 0.01 * step,
                            "entropy": 2.0 - 0.1 * step,
                            "grad_norm": 0.5 + 0.05 * step,
                            "staleness_mean": 0.5,
                            "step_time_s": 2.5,
                            "swap_time_s": 0.4 if step % 2 else None,  # not published every step: gaps in the line
                            "optimizer_stepped": True,
                            # crossing the learner's mismatch_alarm (0.1) at the last two steps
                            "mismatch_mean_abs": 0.03 * step,
                            "mismatch_alarmed": 0.03 * step > 0.1,
                        },
                    )
                )
    finally:
        engine.dispose()


def _byte_level_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character table (what a ByteLevel decoder reverses)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


@pytest.fixture(scope="module")
def fake_tokenizer_dir(tmp_path_factory) -> Path:
    """A tokenizer.json for the fake engine's ids (one per UTF-8 byte, after three specials).

    With it the gateway decodes what the fake engine sampled back to the very text, so the viewer's
    pieces and texts can be checked exactly (a real model's tokenizer would decode them to noise).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    vocab.update({char: byte + BYTE_OFFSET for byte, char in _byte_level_chars().items()})
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
    engine = FakeEngine(script=_script(), record_requests=False)
    with BackgroundServer(create_fake_engine_app(engine)) as fake:
        settings = gateway_settings(sqlite_url(db_path), fake.url, model_dir=str(fake_tokenizer_dir))
        with BackgroundGateway(settings) as gateway:
            weather = _record_run(gateway.url)
            _write_steps(db_path, RUN)
            yield Recorded(gateway.url, db_path, fake.url, weather)


@pytest.fixture(scope="module")
def db(recorded) -> Iterator[Session]:
    """The store, read directly: what the viewer shows is checked against these rows."""
    engine = create_engine(f"sqlite:///{recorded.db_path}")
    with Session(engine) as session:
        yield session
    engine.dispose()


class Browser:
    """One page in headless Chromium that records console errors and every request it makes."""

    def __init__(self, page, out_dir: Path):
        self.page, self.out_dir = page, out_dir
        self.errors: list[str] = []
        self.urls: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.urls.append(r.url))
        # Belt and braces: a request for anything off loopback is refused, not just reported.
        page.route("**/*", lambda route: route.continue_() if _local(route.request.url) else route.abort())

    def goto_hash(self, url: str, route: str) -> None:
        """Open a view with the admin key in the fragment, as the URL `harnessrl serve` prints."""
        self.page.goto(f"{url}/ui/#key={TEST_ADMIN_KEY}&{route}")
        self.ready()

    def click(self, selector: str) -> None:
        """Follow a link to another view and wait until that view is drawn."""
        # The old view says "ready" until the hashchange reaches app.js: mark it stale first.
        self.page.evaluate("() => { document.getElementById('app').dataset.state = 'stale'; }")
        self.page.locator(selector).first.click()
        self.ready()

    def ready(self) -> None:
        """Wait until the routed view finished loading (app.js sets data-state)."""
        self.page.wait_for_function("() => document.getElementById('app').dataset.state === 'ready'")

    def texts(self, selector: str) -> list[str]:
        return self.page.locator(selector).all_inner_texts()

    def attrs(self, selector: str, name: str) -> list[str]:
        return self.page.locator(selector).evaluate_all(f"els => els.map(e => e.getAttribute('{name}'))")

    def shot(self, name: str) -> Path:
        path = self.out_dir / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path


def _local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "about") or parts.hostname == "127.0.0.1"


@pytest.fixture
def browser(tmp_path) -> Iterator[Browser]:
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = chromium.new_page(viewport=VIEWPORT)
            page.set_default_timeout(20_000)
            view = Browser(page, tmp_path)
            yield view
            assert view.errors == [], f"console errors: {view.errors}"
            assert all(_local(u) for u in view.urls), [u for u in view.urls if not _local(u)]
        finally:
            chromium.close()


def _reward_text(reward: float | None) -> str:
    return "–" if reward is None else f"{reward:.2f}".rstrip("0").rstrip(".")


def _mask_sum(call: Call, calls: dict[int, Call]) -> int:
    """Prompt tokens sampled by the call's ancestors: along a path, each one's output is in the prompt."""
    total, parent = 0, call.parent_id
    while parent is not None:
        total += calls[parent].num_output_tokens
        parent = calls[parent].parent_id
    return total


def test_run_group_rollout_call_by_clicking(recorded, db, browser):
    run_id = db.scalars(select(Run.id).where(Run.name == RUN)).one()
    rollouts = db.scalars(select(Rollout).where(Rollout.run_id == run_id).order_by(Rollout.id)).all()
    groups = db.scalars(select(Group).where(Group.run_id == run_id).order_by(Group.id)).all()
    page = browser.page

    browser.goto_hash(recorded.url, "/runs")
    _check_runs_page(browser, db)
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
            assert _reward_text(member.reward) in cell or member.status == "running"
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
    assert browser.texts("[data-testid=rollout-reward]") == [_reward_text(weather.reward)]
    components = browser.texts("[data-testid=reward-components] .component")
    assert components == [f"{name} = {_reward_text(value)}" for name, value in weather.rewards.items()]
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
    _check_token_view(browser, calls[leaf], calls)
    assert _mask_sum(calls[leaf], calls) > 0 and len(set(_earlier_logprobs(calls[leaf], calls))) > 1
    browser.shot("5-call")

    browser.click("[data-testid=parent-link]")  # up to the fork
    assert browser.texts("[data-testid=call-fork]") == [f"fork of #{fork.fork_of} · {fork.drift_tokens} drift tokens"]
    _check_token_view(browser, fork, calls)
    browser.shot("6-fork-call")


def _check_runs_page(browser: Browser, db: Session) -> None:
    """Newest run first, each with its rollouts counted as the store holds them."""
    runs = db.scalars(select(Run).order_by(Run.id.desc())).all()
    assert browser.attrs("[data-testid=run-row]", "data-run") == [r.name for r in runs] == [MANY_RUN, RUN]
    for run in runs:
        rollouts = db.scalars(select(Rollout).where(Rollout.run_id == run.id)).all()
        rewards = [r.reward for r in rollouts if r.reward is not None]
        row = f"[data-testid=run-row][data-run={run.name}]"
        assert browser.texts(f"{row} [data-testid=run-rollouts]") == [str(len(rollouts))]
        finished = sum(r.status == "finished" for r in rollouts)
        assert browser.texts(f"{row} [data-testid=run-finished]") == [str(finished)]
        [mean] = browser.texts(f"{row} [data-testid=run-reward-mean]")
        assert (mean == "–") if not rewards else float(mean) == pytest.approx(sum(rewards) / len(rewards), abs=5e-4)
        assert browser.texts(f"{row} [data-testid=run-last-activity]") != ["–"]


def _earlier_logprobs(call: Call, calls: dict[int, Call]) -> list[float]:
    """The sampler's logprobs of the prompt tokens the call's ancestors sampled, in prompt order."""
    found, parent = {}, call.parent_id
    while parent is not None:
        ancestor = calls[parent]
        found.update(enumerate(unpack_logprobs(ancestor.output_logprobs), start=ancestor.num_prompt_tokens))
        parent = ancestor.parent_id
    return [found[position] for position in sorted(found)]


def _check_token_view(browser: Browser, call: Call, calls: dict[int, Call]) -> None:
    whole = prompt_delta.whole_prompts(prompt_delta.as_stored(c) for c in calls.values())  # rows store deltas
    prompt, output = unpack_ids(whole[call.id]), unpack_ids(call.output_ids)
    tokens = browser.page.locator("[data-testid=token]")
    assert tokens.count() == len(prompt) + len(output)
    assert browser.page.locator("[data-testid=token][data-sampled]").count() == len(output) + _mask_sum(call, calls)
    # Prompt tokens an earlier call sampled are shaded by that call's logprob and marked as earlier.
    earlier = browser.attrs("[data-testid=token].prompt.earlier", "data-logprob")
    assert (
        len(earlier)
        == browser.page.locator("[data-testid=token].prompt[data-logprob]").count()
        == _mask_sum(call, calls)
    )
    assert [float(x) for x in earlier] == _earlier_logprobs(call, calls)
    shaded = browser.page.locator("[data-testid=token].prompt.earlier").evaluate_all(
        "els => els.map(e => e.style.backgroundColor)"
    )
    assert all(shaded) and len(set(shaded)) == len(set(earlier))  # by value, not one flat colour
    titles = browser.attrs("[data-testid=token]", "title")
    assert [int(t.split(" · ")[1].removeprefix("id ")) for t in titles] == prompt + output
    assert all("logprob" in t for t in titles[len(prompt) :])
    assert not browser.page.locator(".legend .warn").count()  # the gateway had a tokenizer: pieces shown
    shown_output = browser.texts("[data-testid=token].output")
    assert "".join(shown_output).replace("↵", "") == decode(output) + "<|im_end|>"
    assert browser.texts("[data-testid=finish-reason]") == [call.finish_reason]
    assert browser.page.locator("[data-testid=output-text]").inner_text() == decode(output) + "<|im_end|>"


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
    assert browser.errors and all("status of 404" in e for e in browser.errors), browser.errors
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


def _write_mismatch(db_path: Path, call: Call, deltas: np.ndarray) -> None:
    """A trained call's per-token mismatch, as the learner stores it (store.mismatch)."""
    engine = create_engine(f"sqlite:///{db_path}")
    try:
        with Session(engine) as session, session.begin():
            run_id = session.scalars(select(Rollout.run_id).where(Rollout.id == call.rollout_id)).one()
            compared = np.abs(deltas[np.isfinite(deltas)])
            session.add(
                CallMismatch(
                    call_id=call.id,
                    run_id=run_id,
                    step=3,
                    version=2,
                    tokens=int(compared.size),
                    mean_abs=float(compared.mean()),
                    max_abs=float(compared.max()),
                    k3=0.001,
                    frac_over=float((compared > 0.1).mean()),
                    deltas=pack_deltas(deltas),
                )
            )
    finally:
        engine.dispose()


def test_a_trained_calls_mismatch_is_a_heatmap_that_shows_both_log_probs(recorded, db, browser):
    calls = db.scalars(select(Call).where(Call.rollout_id == recorded.weather_rollout).order_by(Call.id)).all()
    call = max(calls, key=lambda c: c.num_output_tokens)  # the tool call: the longest output
    n = call.num_output_tokens
    # small differences, one large one, and tokens not compared (sampled by another version)
    deltas = np.array([np.nan if i % 7 == 3 else (0.4 if i == 5 else 0.004 * (i % 5)) for i in range(n)])
    _write_mismatch(recorded.db_path, call, deltas)

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
