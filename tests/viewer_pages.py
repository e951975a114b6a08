"""What the viewer tests record and click: a run made the way agents make one (through the real gateway
on the fake engine, learner steps written as the learner writes them), the browser, and the checks of a
page against the store's rows."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from openai import OpenAI
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from store import prompt_delta
from store.arrays import pack_deltas, unpack_ids, unpack_logprobs
from store.roles import ROLE_NAMES
from store.tables import Call, CallMismatch, LearnerStep, Rollout, Run
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, WEATHER_TOOL
from tests.fake_tokens import FakeReply, decode
from tests.waiting import wait_until

playwright_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (in the dev extras)")
UI_MS = 300_000  # a guard against a hang: a busy machine draws pages slowly


RUN = "viewer-run"


MANY_RUN = "viewer-many"  # rollouts enough to need a second page


MANY_ROLLOUTS = 60  # the viewer pages by 50


# Agent output is untrusted: this must show up as text and never run.
HOSTILE = 'You are welcome. <img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


STEPS = 5


# The judge's verdict as the runner stores it (harnesses.grading.judge.Judgement.detail); its reasons may quote the agent.
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


def viewer_script() -> list[FakeReply]:
    return [
        FakeReply(content="Weather in Paris"),  # the title side call
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="Sunny in Paris."),
        FakeReply(content=HOSTILE),
    ]


def weather_rollout(client: OpenAI) -> None:
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


def record_run(url: str) -> int:
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
    weather_rollout(OpenAI(base_url=f"{url}/v1", api_key=weather["token"], max_retries=0))
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


def write_steps(db_path: Path, run: str) -> None:
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


def byte_level_chars() -> dict[int, str]:
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
        page.route("**/*", lambda route: route.continue_() if is_loopback(route.request.url) else route.abort())

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

    def wait_for_errors(self, count: int) -> None:
        """Until ``count`` console errors were logged: a view that fails on the first of several fetches is
        drawn before the others' failures reach the console."""

        def logged() -> bool:
            self.page.wait_for_timeout(20)  # Playwright delivers console events while it waits
            return len(self.errors) >= count

        wait_until(logged, f"{count} console errors")

    def texts(self, selector: str) -> list[str]:
        return self.page.locator(selector).all_inner_texts()

    def attrs(self, selector: str, name: str) -> list[str]:
        return self.page.locator(selector).evaluate_all(f"els => els.map(e => e.getAttribute('{name}'))")

    def shot(self, name: str) -> Path:
        path = self.out_dir / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path


@contextmanager
def browsing(out_dir: Path) -> Iterator[Browser]:
    """A page in the system's headless Chromium; on the way out, no console error and no request off
    loopback. Each wait is bounded by UI_MS, a guard against a hang, not a speed check."""
    chromium_path = shutil.which("chromium")
    assert chromium_path, "needs a system Chromium (tests/setup_machine.sh installs it)"
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path, headless=True, args=["--no-sandbox"])
        try:
            page = chromium.new_page(viewport=VIEWPORT)
            page.set_default_timeout(UI_MS)
            view = Browser(page, out_dir)
            yield view
            assert view.errors == [], f"console errors: {view.errors}"
            assert all(is_loopback(u) for u in view.urls), [u for u in view.urls if not is_loopback(u)]
        finally:
            chromium.close()


def is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "about") or parts.hostname == "127.0.0.1"


def reward_text(reward: float | None) -> str:
    return "–" if reward is None else f"{reward:.2f}".rstrip("0").rstrip(".")


def mask_sum(call: Call, calls: dict[int, Call]) -> int:
    """Prompt tokens sampled by the call's ancestors: along a path, each one's output is in the prompt."""
    total, parent = 0, call.parent_id
    while parent is not None:
        total += calls[parent].num_output_tokens
        parent = calls[parent].parent_id
    return total


def check_runs_page(browser: Browser, db: Session) -> None:
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


def earlier_logprobs(call: Call, calls: dict[int, Call]) -> list[float]:
    """The sampler's logprobs of the prompt tokens the call's ancestors sampled, in prompt order."""
    found, parent = {}, call.parent_id
    while parent is not None:
        ancestor = calls[parent]
        found.update(enumerate(unpack_logprobs(ancestor.output_logprobs), start=ancestor.num_prompt_tokens))
        parent = ancestor.parent_id
    return [found[position] for position in sorted(found)]


def check_token_view(browser: Browser, call: Call, calls: dict[int, Call]) -> None:
    whole = prompt_delta.whole_prompts(prompt_delta.as_stored(c) for c in calls.values())  # rows store deltas
    prompt, output = unpack_ids(whole[call.id]), unpack_ids(call.output_ids)
    tokens = browser.page.locator("[data-testid=token]")
    assert tokens.count() == len(prompt) + len(output)
    assert browser.page.locator("[data-testid=token][data-sampled]").count() == len(output) + mask_sum(call, calls)
    # Prompt tokens an earlier call sampled are shaded by that call's logprob and marked as earlier.
    earlier = browser.attrs("[data-testid=token].prompt.earlier", "data-logprob")
    assert (
        len(earlier)
        == browser.page.locator("[data-testid=token].prompt[data-logprob]").count()
        == mask_sum(call, calls)
    )
    assert [float(x) for x in earlier] == earlier_logprobs(call, calls)
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
    roles = prompt_delta.whole_roles(prompt_delta.as_stored(c) for c in calls.values())[call.id]
    expected = [None] * len(prompt) if roles is None else [ROLE_NAMES[r] for r in roles]
    assert browser.attrs("[data-testid=token].prompt", "data-role") == expected  # each token's role, if known


@contextmanager
def prompt_roles_written(db_path: Path, call_id: int, roles: bytes) -> Iterator[None]:
    """A call's stored prompt roles (store.roles) replaced while the block runs, then put back."""
    engine = create_engine(f"sqlite:///{db_path}")
    try:
        with Session(engine) as session, session.begin():
            call = session.get(Call, call_id)
            before, call.prompt_roles = call.prompt_roles, roles
        yield
    finally:
        with Session(engine) as session, session.begin():
            session.get(Call, call_id).prompt_roles = before
        engine.dispose()


def write_mismatch(db_path: Path, call: Call, deltas: np.ndarray) -> None:
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
