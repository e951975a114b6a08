"""Several engines behind one gateway (gateway.engine.pool): sticky rollouts, least-loaded and
version-aware choice, back-pressure, failover and recovery with the adapters loaded again."""

from __future__ import annotations

import asyncio

from gateway.engine.pool import EnginePool
from gateway.engine.routing import EngineLoad, StickyLeastLoaded, begin_call, choose, least_loaded
from gateway.errors import EngineUnavailable
from tests.engine_pool import fake_engines, pool_gateway
from tests.waiting import until


def load(
    index: int,
    in_flight: int = 0,
    queued: int = 0,
    rollouts: int = 0,
    healthy: bool = True,
    models: tuple[str, ...] = ("base",),
) -> EngineLoad:
    return EngineLoad(index, healthy, in_flight, queued, rollouts, frozenset(models))


# -- the choice, as pure functions -------------------------------------------------------------------


def test_least_loaded_counts_calls_in_flight_and_queued_then_rollouts_then_pool_order():
    engines = [
        load(0, in_flight=2),
        load(1, in_flight=1, queued=1),
        load(2, in_flight=1, rollouts=3),
        load(3, in_flight=1, rollouts=3),
    ]
    assert least_loaded(engines, "base") == 2
    assert least_loaded(engines, "base", exclude=frozenset({2})) == 3


def test_least_loaded_prefers_engines_that_serve_the_version_and_skips_unhealthy_ones():
    engines = [
        load(0, models=("base",)),
        load(1, in_flight=5, models=("base", "policy-v3")),
        load(2, healthy=False, models=("base", "policy-v3")),
    ]
    assert least_loaded(engines, "policy-v3") == 1
    assert least_loaded([load(0, healthy=False)], "base") is None


def test_a_rollout_stays_on_its_engine_however_loaded_and_moves_only_when_it_is_taken_out():
    engines = [load(0, in_flight=50), load(1)]
    assert choose(engines, "base", sticky=0).index == 0
    moved = choose([load(0, healthy=False), load(1)], "base", sticky=0)
    assert (moved.index, moved.moved_from) == (1, 0)


def test_router_spreads_new_rollouts_and_remembers_each_ones_engine():
    router = StickyLeastLoaded()
    engines = [load(0), load(1)]
    firsts = [
        router.route(rollout, "base", [load(i, rollouts=router.rollouts_on(i)) for i in range(2)]).index
        for rollout in range(6)
    ]
    assert firsts == [0, 1, 0, 1, 0, 1]
    assert [router.route(rollout, "base", engines).index for rollout in range(6)] == firsts
    assert (router.rollouts_on(0), router.rollouts_on(1)) == (3, 3)


# -- through the gateway, on fake engine servers ---------------------------------------------------


async def test_every_call_of_a_rollout_goes_to_one_engine_and_rollouts_spread_over_all(sqlite_db):
    async with pool_gateway(sqlite_db, fake_engines(3)) as gateway:
        rollouts = [await gateway.new_rollout(task=f"t{i}") for i in range(6)]
        for turn in range(3):
            for rollout in rollouts:
                response = await gateway.chat(rollout, f"turn {turn}", stream=turn == 1)
                assert response.status_code == 200, response.text
        by_rollout = {r["id"]: {c["engine"] for c in gateway.calls(r["id"])} for r in rollouts}
        assert all(len(engines) == 1 for engines in by_rollout.values()), by_rollout
        served = [next(iter(engines)) for engines in by_rollout.values()]
        assert sorted(served.count(url) for url in gateway.urls) == [2, 2, 2]
        assert [len(fake.requests) for fake in gateway.fakes] == [6, 6, 6]
        assert all(c["moved_from"] is None for c in gateway.calls())


async def test_a_new_rollout_goes_to_the_engine_with_the_fewest_calls_in_flight(sqlite_db):
    fakes = fake_engines(2)
    async with pool_gateway(sqlite_db, fakes) as gateway:
        first, second = await gateway.new_rollout(task="a"), await gateway.new_rollout(task="b")
        assert (await gateway.chat(first)).status_code == 200
        assert (await gateway.chat(second)).status_code == 200
        busy = gateway.calls(first["id"])[0]["engine"]
        fakes[gateway.urls.index(busy)].delay_s = 2.0  # still in flight when the third picks, however slow
        slow = asyncio.create_task(gateway.chat(first, "a long one"))
        await until(lambda: sum(m.in_flight for m in gateway.pool.members) == 1, "the slow call in flight")
        third = await gateway.new_rollout(task="c")  # a tie on rollouts: the calls in flight decide
        assert (await gateway.chat(third)).status_code == 200
        assert (await slow).status_code == 200
        assert gateway.calls(third["id"])[0]["engine"] != busy


async def test_a_published_adapter_is_on_every_engine_before_the_publication_returns(sqlite_db):
    fakes = fake_engines(3)
    async with pool_gateway(sqlite_db, fakes) as gateway:
        published = await gateway.http.post("/admin/adapters", json={"version": 1, "path": "/adapters/v1"})
        assert published.status_code == 200, published.text
        assert [fake.adapters for fake in fakes] == [{"policy-v1": "/adapters/v1"}] * 3
        rollouts = [await gateway.new_rollout(task=f"t{i}") for i in range(3)]
        for rollout in rollouts:
            assert (await gateway.chat(rollout)).status_code == 200
        assert {c["engine_model"] for c in gateway.calls()} == {"policy-v1"}
        assert len({c["engine"] for c in gateway.calls()}) == 3


async def test_a_publication_one_engine_refuses_leaves_the_adapter_on_no_engine(sqlite_db):
    fakes = fake_engines(2)
    fakes[1].load_error = "adapter folder /adapters/v1 is not readable here"
    async with pool_gateway(sqlite_db, fakes) as gateway:
        published = await gateway.http.post("/admin/adapters", json={"version": 1, "path": "/adapters/v1"})
        assert published.status_code >= 400
        assert [fake.adapters for fake in fakes] == [{}, {}]
        assert (await gateway.http.get("/admin/policy")).json()["current_version"] == 0


async def test_calls_beyond_the_in_flight_bound_queue_with_their_wait_recorded_and_a_full_queue_is_a_503(sqlite_db):
    # Long enough that the second and third arrive while the first is in flight, and that the two
    # waits fall either side of half of it, on a busy machine too.
    fakes = fake_engines(1, delay_s=1.5)
    async with pool_gateway(sqlite_db, fakes, engine_max_in_flight=1, engine_max_queued=1) as gateway:
        rollout = await gateway.new_rollout()
        first = asyncio.create_task(gateway.chat(rollout, "one"))
        await until(lambda: gateway.pool.members[0].in_flight == 1, "the first call in flight")
        second = asyncio.create_task(gateway.chat(rollout, "two"))
        await until(lambda: gateway.pool.members[0].queued == 1, "the second call queued")
        refused = await gateway.chat(rollout, "three")
        answers = [await first, await second]

        assert [a.status_code for a in answers] == [200, 200]
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "engine_busy"
        waits = sorted(c["queue_ms"] for c in gateway.calls(rollout["id"]))
        assert len(waits) == 2 and waits[0] < 750 < waits[1], waits
        assert len(fakes[0].requests) == 2


async def test_a_failed_engine_is_taken_out_its_rollouts_move_and_it_returns_with_the_adapters(sqlite_db):
    fakes = fake_engines(2)
    async with pool_gateway(sqlite_db, fakes) as gateway:
        assert (await gateway.http.post("/admin/adapters", json={"version": 1, "path": "/a/v1"})).status_code == 200
        rollouts = [await gateway.new_rollout(task=f"t{i}") for i in range(4)]
        for rollout in rollouts:
            assert (await gateway.chat(rollout)).status_code == 200
        down = gateway.calls(rollouts[0]["id"])[0]["engine"]
        index = gateway.urls.index(down)
        gateway.servers[index].stop()  # the engine dies

        for rollout in rollouts:  # every rollout finishes; those of the dead engine on the other one
            assert (await gateway.chat(rollout, "after")).status_code == 200
        moved = [c for c in gateway.calls() if c["moved_from"] is not None]
        assert {c["moved_from"] for c in moved} == {down} and len(moved) == 2
        assert all(c["engine"] != down for c in gateway.calls()[4:])
        assert not gateway.pool.members[index].healthy
        engines = (await gateway.http.get("/admin/engines")).json()
        assert [e["healthy"] for e in engines] == [i != index for i in range(2)]
        assert engines[1 - index]["rollouts"] == 4 and engines[index]["rollouts"] == 0
        assert f'harnessrl_engine_healthy{{engine="{index}"}} 0.0' in (await gateway.http.get("/metrics")).text

        # It comes back as a fresh process with a broken capture: it stays out until the probe passes.
        fresh = fake_engines(1, omit=frozenset({"prompt_token_ids"}))[0]
        failed_probes = spy_failed_probes(gateway.pool.members[index].client)
        gateway.restart_engine(index, fresh)
        await until(lambda: failed_probes, "a capture probe of the fresh engine to fail")  # it ran, not a nap
        assert not gateway.pool.members[index].healthy
        fresh.omit = frozenset()
        await until(lambda: gateway.pool.members[index].healthy, "the engine back in the pool")
        assert fresh.adapters == {"policy-v1": "/a/v1"}  # loaded again before it serves
        back = (await gateway.http.get("/admin/engines")).json()[index]
        assert back["healthy"] and "policy-v1" in back["models"]
        newcomer = await gateway.new_rollout(task="new")
        assert (await gateway.chat(newcomer)).status_code == 200
        assert gateway.calls(newcomer["id"])[0]["engine"] == down  # the least loaded again


def spy_failed_probes(client) -> list[Exception]:
    """The capture probes of ``client`` that failed, from now on (the pool's check before it serves again)."""
    failed: list[Exception] = []
    verify = client.verify

    async def spied(model: str) -> None:
        try:
            await verify(model)
        except Exception as exc:
            failed.append(exc)
            raise

    client.verify = spied
    return failed


async def test_a_rollout_token_cannot_choose_or_learn_its_engine(sqlite_db):
    async with pool_gateway(sqlite_db, fake_engines(2)) as gateway:
        first, second = await gateway.new_rollout(task="a"), await gateway.new_rollout(task="b")
        assert (await gateway.chat(first)).status_code == 200
        assert (await gateway.chat(second)).status_code == 200
        engine_of = {r["id"]: gateway.calls(r["id"])[0]["engine"] for r in (first, second)}
        assert engine_of[first["id"]] != engine_of[second["id"]]
        other = engine_of[second["id"]]
        port = other.rsplit(":", 1)[1]
        tries = [
            {"headers": {"x-harnessrl-engine": other, "x-engine-url": other, "x-forwarded-host": other}},
            {"engine": other, "engine_url": other, "user": other, "metadata": {"engine": other}},
        ]
        for attempt in tries:
            headers = attempt.pop("headers", None)
            response = await gateway.chat(first, "move me", headers=headers, **attempt)
            assert response.status_code in (200, 400), response.text
            assert other not in response.text and f":{port}" not in response.text
            assert not any(port in value for value in response.headers.values())
        assert {c["engine"] for c in gateway.calls(first["id"])} == {engine_of[first["id"]]}
        health = await gateway.agent.get("/health")
        assert all(url.rsplit(":", 1)[1] not in health.text for url in gateway.urls)


async def test_a_gateway_with_several_engines_follows_a_publication_onto_all_of_them_before_serving_it(sqlite_db):
    publisher_fakes, follower_fakes = fake_engines(1), fake_engines(2)
    async with (
        pool_gateway(sqlite_db, publisher_fakes) as publisher,
        pool_gateway(sqlite_db, follower_fakes, follow_interval_s=0.05) as follower,
    ):
        published = await publisher.http.post("/admin/adapters", json={"version": 1, "path": "/adapters/v1"})
        assert published.status_code == 200, published.text
        seen = []  # (version served, each engine's adapters) at every look

        async def serving_v1() -> bool:
            current = (await follower.http.get("/admin/policy")).json()["current_version"]
            seen.append((current, [dict(fake.adapters) for fake in follower_fakes]))
            return current == 1

        await until(serving_v1, "the follower serving v1")
        assert all(adapters == [{"policy-v1": "/adapters/v1"}] * 2 for current, adapters in seen if current == 1)


async def test_a_pinned_version_loaded_on_demand_is_loaded_on_every_engine(sqlite_db):
    fakes = fake_engines(2)
    async with pool_gateway(sqlite_db, fakes, max_staleness=0) as gateway:
        for version in (1, 2):
            response = await gateway.http.post("/admin/adapters", json={"version": version, "path": f"/a/v{version}"})
            assert response.status_code == 200, response.text
        assert [set(fake.adapters) for fake in fakes] == [{"policy-v2"}] * 2  # v1 retired everywhere
        pinned = await gateway.new_rollout(policy="policy-v1")
        assert (await gateway.chat(pinned)).status_code == 200
        assert [set(fake.adapters) for fake in fakes] == [{"policy-v1", "policy-v2"}] * 2
        assert gateway.calls(pinned["id"])[0]["engine_model"] == "policy-v1"


async def test_an_agent_learns_no_engine_address_from_errors_when_every_engine_is_down(sqlite_db):
    async with pool_gateway(sqlite_db, fake_engines(2)) as gateway:
        rollout = await gateway.new_rollout()
        assert (await gateway.chat(rollout)).status_code == 200
        for server in gateway.servers:
            server.stop()
        failed = await gateway.chat(rollout, "again")
        assert failed.status_code == 503, failed.text
        assert failed.json()["error"]["code"] == "engine_unavailable"
        assert all(url.rsplit(":", 1)[1] not in failed.text for url in gateway.urls), failed.text
        again = await gateway.chat(rollout, "and again")  # both out now: refused at once, still unnamed
        assert again.status_code == 503 and all(url.rsplit(":", 1)[1] not in again.text for url in gateway.urls)


class StubEngine:
    """An engine client whose chat calls wait for ``fail`` and then fail in transport (or answer at once)."""

    def __init__(self):
        self.calls, self.fail = 0, None

    async def chat(self, body: dict) -> dict:
        self.calls += 1
        if self.fail is not None:
            await self.fail.wait()
            raise EngineUnavailable("engine at http://a is unreachable")
        return {"ok": True}

    async def health(self) -> bool:
        return False


async def test_calls_queued_for_an_engine_that_is_taken_out_go_to_another_without_trying_it():
    dying, other = StubEngine(), StubEngine()
    dying.fail = asyncio.Event()
    pool = EnginePool([("http://a", dying), ("http://b", other)], max_in_flight=1, probe_interval_s=60)

    async def call() -> tuple[dict, str | None, str | None]:
        route = begin_call(7)
        answer = await pool.chat({"model": "base"})
        return answer, route.engine, route.moved_from

    try:
        first = asyncio.create_task(call())
        await until(lambda: pool.members[0].in_flight == 1, "the first call in flight")
        second = asyncio.create_task(call())
        await until(lambda: pool.members[0].queued == 1, "the second call queued")
        dying.fail.set()
        assert await first == ({"ok": True}, "http://b", "http://a")
        assert await second == ({"ok": True}, "http://b", None)  # the rollout is on b already
        assert (dying.calls, other.calls) == (1, 2)
    finally:
        await pool.close(clients=False)
