"""Many policies on one gateway and one engine: each run is served its own policy's adapter whatever model
name its agent sends, each policy's publications touch only its versions, a full engine unloads the
adapters no call needs (least recently used), a restart restores every policy, and bad names are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.policy.policy_set import PolicySet
from store.policies import (
    DEFAULT_POLICY,
    LATEST,
    InvalidPolicyName,
    Pin,
    check_policy_name,
    parse_adapter_name,
    parse_pin,
)
from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.policy_calls import policy_rollout, publish_policy, served_call


@pytest.fixture
async def roomy_gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_staleness=1)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


@pytest.fixture
async def small_gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    """A gateway whose engines hold 3 adapters at most (every policy's together)."""
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_staleness=5, max_adapters=3)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


def test_policy_names_are_safe_identifiers():
    for good in ("pi", "opencode", "claude-code", "team_a", "policy"):
        assert check_policy_name(good) == good
    for bad in ("", "Pi", "1pi", "pi/../x", "pi v1", "pi-v3", "base", "latest", "a" * 41, "pi\n"):
        with pytest.raises(InvalidPolicyName, match="not a policy name"):
            check_policy_name(bad)


def test_pins_name_a_policy_and_a_version():
    assert parse_pin("base") == Pin(None, 0)
    assert parse_pin("latest") == Pin(None, LATEST)
    assert parse_pin("pi@latest") == Pin("pi", LATEST)
    assert parse_pin("opencode@v3") == Pin("opencode", 3)
    assert parse_pin("pi-v2") == Pin("pi", 2)
    assert parse_pin("policy-v7") == Pin(DEFAULT_POLICY, 7)
    assert parse_adapter_name("claude-code-v12") == ("claude-code", 12)
    for bad in ("pi@v0", "PI@latest", "pi@", "x-v1@v2", "pi@v1; drop"):
        with pytest.raises(InvalidPolicyName):
            parse_pin(bad)


async def test_each_run_is_served_its_own_policys_adapter_whatever_model_it_names(roomy_gateway):
    gw = roomy_gateway
    await publish_policy(gw, "pi", 1)
    await publish_policy(gw, "opencode", 1)
    await publish_policy(gw, "opencode", 2)
    pi, opencode = await policy_rollout(gw, "pi-run", "pi"), await policy_rollout(gw, "oc-run", "opencode")
    default = await policy_rollout(gw, "plain-run")
    assert (await served_call(gw, pi))["engine_model"] == "pi-v1"
    assert (await served_call(gw, opencode))["engine_model"] == "opencode-v2"
    assert (await served_call(gw, default))["engine_model"] == gw.fake.model  # the default policy: no version yet
    # an agent naming another policy's adapter, or a version of it, is still served its own policy
    for name in ("opencode-v2", "opencode-v1", "opencode", "policy-v1"):
        call = await served_call(gw, pi, model=name)
        assert (call["policy"], call["engine_model"], call["policy_version"]) == ("pi", "pi-v1", 1)
    assert gw.fake.requests[-1]["model"] == "pi-v1"


async def test_an_agent_cannot_reach_another_policy_by_headers_fields_or_listing(roomy_gateway):
    gw = roomy_gateway
    await publish_policy(gw, "opencode", 1)
    pi = await policy_rollout(gw, "pi-run", "pi")
    tricks = {"x-harnessrl-policy": "opencode", "x-harnessrl-run": "oc-run", "openai-organization": "opencode"}
    body = {
        "model": "opencode-v1",
        "messages": [{"role": "user", "content": "hi"}],
        "policy": "opencode@latest",
        "metadata": {"policy": "opencode"},
    }
    answer = await gw.agent.post(f"/r/{pi['token']}/v1/chat/completions", json=body, headers=tricks)
    assert answer.status_code in (200, 400), answer.text
    calls = (await gw.http.get(f"/api/rollouts/{pi['id']}/calls", params={"tokens": False})).json()["data"]
    assert all((c["policy"], c["engine_model"]) == ("pi", gw.fake.model) for c in calls)
    assert "opencode-v1" not in [r["model"] for r in gw.fake.requests]
    listed = (await gw.agent.get(f"/r/{pi['token']}/v1/models")).json()["data"]
    assert [m["id"] for m in listed] == ["policy"]  # its own policy: no version yet, nothing of opencode's
    for path in ("/admin/policies", "/admin/policy?policy=opencode"):
        refused = await gw.agent.get(path, headers={"authorization": f"Bearer {pi['token']}"})
        assert refused.status_code == 401


async def test_a_publication_of_one_policy_leaves_the_others_versions_alone(roomy_gateway):
    gw = roomy_gateway
    await publish_policy(gw, "pi", 1)
    for version in (1, 2, 3):
        published = await publish_policy(gw, "opencode", version)
    assert published["unloaded"] == [1]  # max_staleness 1: opencode's own v1 only
    assert set(gw.fake.adapters) == {"pi-v1", "opencode-v2", "opencode-v3"}
    views = {p["policy"]: p for p in (await gw.http.get("/admin/policies")).json()}
    assert (views["pi"]["current_version"], views["opencode"]["current_version"]) == (1, 3)
    assert (await gw.http.get("/admin/policy", params={"policy": "pi"})).json()["current_version"] == 1
    # versions are per policy: pi's v2 is new even though opencode has a v3
    assert (await publish_policy(gw, "pi", 2))["name"] == "pi-v2"
    await publish_policy(gw, "pi", 2, status=409)


async def test_a_run_keeps_its_policy_and_bad_policy_names_are_refused(roomy_gateway):
    gw = roomy_gateway
    await policy_rollout(gw, "r", "pi")
    other = await gw.http.post("/api/rollouts", json={"run": "r", "task": "t", "run_policy": "opencode"})
    assert other.status_code == 409 and "policy 'pi'" in other.json()["error"]["message"]
    for bad in ("Pi", "../x", "pi-v2", "base"):
        refused = await gw.http.post("/api/rollouts", json={"run": "s", "task": "t", "run_policy": bad})
        assert refused.status_code in (400, 422), (bad, refused.text)
    bad_publish = await gw.http.post("/admin/adapters", json={"policy": "a/b", "version": 1, "path": "/x"})
    assert bad_publish.status_code in (400, 422)


async def test_unknown_policies_where_one_is_read_get_a_404_naming_the_known_ones(roomy_gateway):
    gw = roomy_gateway
    await policy_rollout(gw, "r", "pi")
    view = await gw.http.get("/admin/policy", params={"policy": "nobody"})
    assert view.status_code == 404 and "known policies: pi, policy" in view.json()["error"]["message"]
    for bad in ("Pi", "pi-v2", "../x"):  # the same name rule as everywhere a policy is read
        assert (await gw.http.get("/admin/policy", params={"policy": bad})).status_code in (400, 422), bad
    pinned = await gw.http.post("/api/rollouts", json={"run": "e", "task": "t", "policy": "nobody@latest"})
    assert pinned.status_code == 404 and "pi" in pinned.json()["error"]["message"]
    malformed = await gw.http.post("/api/rollouts", json={"run": "e", "task": "t", "policy": "pi@v0"})
    assert malformed.status_code == 400 and "pi@latest" in malformed.json()["error"]["message"]


async def test_pins_name_another_policys_version_for_evaluation(roomy_gateway):
    gw = roomy_gateway
    await publish_policy(gw, "pi", 1)
    await publish_policy(gw, "opencode", 1)
    eval_run = "held-out"
    on_pi = await policy_rollout(gw, eval_run, "pi", pin="latest", group="a")
    on_opencode = await policy_rollout(gw, eval_run, pin="opencode@v1", group="b")
    on_base = await policy_rollout(gw, eval_run, pin="base", group="c")
    assert (await served_call(gw, on_pi, model="opencode-v1"))["engine_model"] == "pi-v1"
    assert (await served_call(gw, on_opencode))["engine_model"] == "opencode-v1"
    base_call = await served_call(gw, on_base)
    assert (base_call["policy"], base_call["engine_model"]) == ("pi", gw.fake.model)  # the run's policy, version 0
    viewed = (await gw.http.get(f"/api/rollouts/{on_opencode['id']}")).json()
    assert (viewed["policy"], viewed["pinned_version"]) == ("opencode", 1)


async def test_a_full_engine_unloads_the_least_recently_used_adapter_no_call_needs(small_gateway):
    gw = small_gateway
    await publish_policy(gw, "pi", 1)
    await publish_policy(gw, "pi", 2)  # pi-v1 is no longer current: the only one that may go
    await publish_policy(gw, "opencode", 1)
    assert set(gw.fake.adapters) == {"pi-v1", "pi-v2", "opencode-v1"}
    await publish_policy(gw, "ada", 1)
    assert set(gw.fake.adapters) == {"pi-v2", "opencode-v1", "ada-v1"}
    # every held adapter is some policy's current version now: a fourth loads anyway (vLLM pages them)
    await publish_policy(gw, "bob", 1)
    assert set(gw.fake.adapters) == {"pi-v2", "opencode-v1", "ada-v1", "bob-v1"}
    # a rollout pinned to the unloaded version gets it back (loaded again from the store's path)
    pinned = await policy_rollout(gw, "eval", pin="pi-v1")
    assert (await served_call(gw, pinned))["engine_model"] == "pi-v1"
    assert "pi-v1" in gw.fake.adapters


def test_in_flight_calls_keep_their_adapter_and_the_least_recently_used_goes_first():
    policies = PolicySet("policy", "base", max_adapters=4)
    for policy, versions in (("pi", (1, 2, 3)), ("oc", (1,))):
        for version in versions:
            policies.get(policy).publish(version, f"{policy}-v{version}")
    with policies.serving("pi-v1"):
        with policies.serving("pi-v2"):
            pass  # pi-v2 served a call just now, pi-v1 still serves one
        assert [(r.name, v) for r, v in policies.evictable()] == [("pi", 2)]
    assert [(r.name, v) for r, v in policies.evictable()] == [("pi", 2)]  # pi-v1 was used last
    with policies.serving("pi-v2"):
        assert [(r.name, v) for r, v in policies.evictable()] == [("pi", 1)]


async def test_a_restarted_gateway_serves_every_policys_latest_version(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url)
    async for gw in start_gateway(settings, fake_engine):
        await publish_policy(gw, "pi", 1)
        await publish_policy(gw, "opencode", 1)
        await publish_policy(gw, "opencode", 2)
        pi, opencode = await policy_rollout(gw, "pi-run", "pi"), await policy_rollout(gw, "oc-run", "opencode")
    fake_engine.adapters.clear()  # the engine restarted too and lost its adapters
    async for gw in start_gateway(settings, fake_engine):
        assert {"pi-v1", "opencode-v2"} <= set(fake_engine.adapters)
        later_pi = await policy_rollout(gw, "pi-run")  # the run keeps its policy
        assert (await served_call(gw, later_pi))["engine_model"] == "pi-v1"
        assert (await served_call(gw, pi))["engine_model"] == "pi-v1"
        assert (await served_call(gw, opencode))["engine_model"] == "opencode-v2"


async def test_ls_policies_lists_every_policy_bound_to_a_run_or_a_key(roomy_gateway):
    gw = roomy_gateway
    await policy_rollout(gw, "pi-run", "pi")
    await publish_policy(gw, "pi", 1)
    await gw.state.store.live_keys.create("ada", "live-ada", policy="ada")
    rows = {p["policy"]: p for p in (await gw.http.get("/admin/policies")).json()}
    assert set(rows) == {"ada", "pi", DEFAULT_POLICY}
    assert rows["pi"]["runs"] == ["pi-run"] and rows["pi"]["published"] == 1 and rows["pi"]["current_version"] == 1
    assert rows["ada"]["live_users"] == ["ada"] and rows["ada"]["current_version"] == 0
    assert rows["pi"]["engines"] == {gw.state.engine.engines()[0]["url"]: [1]}
    refused = await gw.agent.get("/admin/policies")  # a rollout token or no key: the control plane is closed
    assert refused.status_code == 401


async def test_a_policys_page_shows_each_versions_reward_held_out_pass_and_engines(roomy_gateway):
    gw = roomy_gateway
    trained = await policy_rollout(gw, "pi-run", "pi")
    await served_call(gw, trained)  # served by the base model: version 0
    await gw.http.post(f"/api/rollouts/{trained['id']}/end", json={"status": "finished", "rewards": {"v": 0.25}})
    await publish_policy(gw, "pi", 1)
    for task, reward in (("a", 1.0), ("b", 0.0)):  # held-out: pinned to pi's v1
        pinned = await policy_rollout(gw, "pi-eval", pin="pi@v1", task=task, group=task)
        await served_call(gw, pinned)
        ended = {"status": "finished", "rewards": {"verifier": reward}}
        assert (await gw.http.post(f"/api/rollouts/{pinned['id']}/end", json=ended)).status_code == 200
    page = (await gw.http.get("/api/policies/pi")).json()
    versions = {v["version"]: v for v in page["versions"]}
    assert (page["current_version"], page["runs"]) == (1, ["pi-run"])  # the eval run only pins it
    assert (versions[0]["rollouts"], versions[0]["reward_mean"]) == (1, 0.25)
    assert (versions[1]["eval_rollouts"], versions[1]["pass_at_1"], versions[1]["loaded"]) == (2, 0.5, True)
    assert versions[1]["name"] == "pi-v1" and versions[1]["engines"] == [gw.state.engine.engines()[0]["url"]]
    unknown = await gw.http.get("/api/policies/nobody")
    assert unknown.status_code == 404 and "known policies" in unknown.json()["error"]["message"]
    assert (await gw.http.get("/api/policies/Bad..Name")).status_code in (400, 422)
    assert (await gw.agent.get("/api/policies/pi")).status_code == 401
