"""An attacking agent in a docker and in a bubblewrap sandbox, through the real gateway.

The gateway runs with an admin key on a scripted fake engine. Two rollouts share a group: the
agent's own (A) and a sibling (B). The agent (a stdlib python loop inside the sandbox) asks its model
what to do through its own base URL; the engine answers with a program that tries the control plane,
the sibling's data and model endpoints, path tricks, absolute-form and CONNECT requests, pipelining
with a foreign Host, and the gateway socket directly. Every one must get the bridge's 403, nothing in
the store or the engine may change, and the agent's own model calls must succeed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from gateway.settings import GatewaySettings
from harnessrl.server import BackgroundGateway, BackgroundServer
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.fake_tokens import FakeReply
from tests.integration.backends import BACKENDS, backend_spec, create_backend

ADMIN_KEY = "test-admin-key"
RUN = "attack"
SOCKET_INSIDE = "/run/harnessrl/gw/gateway.sock"  # both backends mount the bridge's socket here

AGENT = r"""
import json, os, subprocess, sys, urllib.request
base = os.environ["HARNESSRL_GATEWAY_URL"]

def chat(messages):
    body = json.dumps({"model": "policy", "messages": messages, "max_tokens": 64}).encode()
    request = urllib.request.Request(base + "/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]["content"]

messages = [{"role": "user", "content": "Raise your reward by any means."}]
program = chat(messages)
ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
messages += [{"role": "assistant", "content": program}, {"role": "user", "content": ran.stdout + ran.stderr}]
print(json.dumps({"attacks": ran.stdout, "errors": ran.stderr, "final": chat(messages)}))
"""

SENDER = r"""
import json, socket

def replies(data):
    statuses = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:] if b": " in line)
        statuses.append(int(lines[0].split()[1]))
        data = rest[int(headers.get(b"content-length", len(rest))):]
    return statuses

def send(raw, unix):
    family = socket.AF_UNIX if unix else socket.AF_INET
    with socket.socket(family) as s:
        s.settimeout(20)
        s.connect(SOCKET if unix else ("127.0.0.1", PORT))
        s.sendall(raw.encode("latin-1"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return replies(data)

print(json.dumps({name: send(raw, unix) for name, (raw, unix) in ATTACKS.items()}))
"""


def request(method: str, target: str, host: str, body: dict | None = None, token: str = "") -> str:
    """One raw HTTP/1.1 request that asks the server to close afterwards."""
    data = json.dumps(body) if body is not None else ""
    auth = f"authorization: Bearer {token}\r\n" if token else ""
    length = f"content-type: application/json\r\ncontent-length: {len(data)}\r\n" if body is not None else ""
    return f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n{auth}{length}connection: close\r\n\r\n{data}"


def attacks(port: int, own: dict, sibling: dict, live_key: str) -> dict[str, tuple[str, bool]]:
    """name -> (raw request bytes as text, sent to the gateway socket directly). ``live_key``: a person's
    live key the agent found (a leaked config file): it opens nothing from a sandbox."""
    host, mine, tok = f"127.0.0.1:{port}", f"/r/{own['token']}/v1", own["token"]
    chat = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    plain = {
        "own reward": request("POST", f"/api/rollouts/{own['id']}/reward", host, {"name": "x", "value": 1000}, tok),
        "sibling reward": request(
            "POST", f"/api/rollouts/{sibling['id']}/reward", host, {"name": "x", "value": -1000}, tok
        ),
        "finish sibling": request("POST", f"/api/rollouts/{sibling['id']}/end", host, {"status": "failed"}, tok),
        "create rollout": request("POST", "/api/rollouts", host, {"run": RUN, "task": "t", "group": "g"}, tok),
        "publish adapter": request("POST", "/admin/adapters", host, {"version": 1_000_000, "path": "/tmp/x"}, tok),
        "list runs": request("GET", "/api/runs", host, token=tok),
        "sibling conversation": request("GET", f"/api/rollouts/{sibling['id']}/conversation", host, token=tok),
        "admin policy": request("GET", "/admin/policy", host, token=tok),
        "viewer": request("GET", "/ui/", host),
        "sibling model call": request(
            "POST", f"/r/{sibling['token']}/v1/chat/completions", host, chat, sibling["token"]
        ),
        "no-token model call": request("POST", "/v1/chat/completions", host, chat),
        "dot-dot": request(
            "POST", f"{mine}/../../api/rollouts/{own['id']}/reward", host, {"name": "x", "value": 1000}, tok
        ),
        "encoded dot-dot": request("GET", f"{mine}/%2e%2e/%2e%2e/api/runs", host, token=tok),
        "encoded slash": request("GET", f"{mine}/..%2F..%2Fapi%2Fruns", host, token=tok),
        "absolute form": request("GET", f"http://{host}/api/runs", host, token=tok),
        "absolute form, own path": request("GET", f"http://{host}{mine}/models", host, token=tok),
        "connect": request("CONNECT", host, host),
        "upgrade": request("GET", f"{mine}/models", host, token=tok).replace(
            "connection: close", "connection: Upgrade\r\nupgrade: websocket"
        ),
        "live key, model call": request("POST", "/v1/chat/completions", host, chat, live_key),
        "live key, feedback": request("POST", "/api/feedback", host, {"user": "ada", "score": 1}, live_key),
        "live key, report": request("GET", "/api/live", host, token=live_key),
    }
    found = {name: (raw, False) for name, raw in plain.items()}
    found["socket directly"] = (request("GET", "/api/runs", host, token=tok), True)
    keep_alive = request("GET", f"{mine}/models", host, token=tok).replace("connection: close\r\n", "")
    found["pipelined, Host: evil"] = (keep_alive + request("GET", "/api/runs", "evil", token=tok), False)
    return found


@pytest.fixture(scope="module")
def engine_server() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_fake_engine_app(FakeEngine(model="fake-base", max_model_len=1_000_000))) as server:
        yield server


@pytest.fixture
def gateway(sqlite_db, engine_server) -> Iterator[BackgroundGateway]:
    settings = GatewaySettings(database_url=sqlite_db, engine_url=engine_server.url, admin_key=ADMIN_KEY)
    with BackgroundGateway(settings) as gw:
        yield gw


def admin(gateway: BackgroundGateway) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, headers={"x-admin-key": ADMIN_KEY}, timeout=30)


def snapshot(gateway: BackgroundGateway, engine: FakeEngine) -> dict:
    """What an attack could have changed: runs, groups, rollouts (but A's call count), policy, adapters."""
    with admin(gateway) as http:
        rollouts = http.get("/api/rollouts", params={"run": RUN, "limit": 100}).json()["data"]
        return {
            "runs": [(r["name"], r.get("rollouts")) for r in http.get("/api/runs").json()["data"]],
            "groups": http.get("/api/groups", params={"run": RUN}).json()["data"],
            "rollouts": [{k: v for k, v in r.items() if k not in ("num_calls", "calls")} for r in rollouts],
            "policy": http.get("/admin/policy").json(),
            "adapters": dict(engine.adapters),
        }


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_attacking_agent_reaches_only_its_own_model_endpoints(backend, gateway, engine_server, sqlite_db):
    engine: FakeEngine = engine_server.app.state.engine
    with admin(gateway) as http:
        own, sibling = (
            http.post("/api/rollouts", json={"run": RUN, "task": "t", "group": "g", "group_size": 2}).json()
            for _ in range(2)
        )
    program = f"PORT = {gateway.port}\nSOCKET = {SOCKET_INSIDE!r}\n"
    live_key = await live_key_of(sqlite_db, "ada")
    program += f"ATTACKS = {attacks(gateway.port, own, sibling, live_key)!r}\n{SENDER}"
    engine.script = lambda body: FakeReply(content=program if len(body["messages"]) == 1 else "Done.")
    engine.requests = []
    before = snapshot(gateway, engine)

    spec = backend_spec(backend, gateway_url=own["base_url"], files={"agent.py": AGENT.encode()})
    async with await create_backend(backend, spec) as sandbox:
        ran = await sandbox.exec(["python3", "agent.py"], timeout_s=180)
    assert ran.ok, ran.text()
    outcome = json.loads(ran.stdout)
    assert outcome["final"] == "Done.", outcome  # the agent's own model calls went through
    results = json.loads(outcome["attacks"])
    expected = {name: [403] for name in results} | {"pipelined, Host: evil": [200, 403]}
    assert results == expected, outcome["errors"]

    assert snapshot(gateway, engine) == before  # no reward, finish, rollout, adapter or policy change
    assert len(engine.requests) == 2  # the engine saw the agent's two own calls, nothing else
    with admin(gateway) as http:
        assert http.get(f"/api/rollouts/{own['id']}").json()["num_calls"] == 2
        assert http.get(f"/api/rollouts/{sibling['id']}").json()["num_calls"] == 0
        assert http.get("/api/rollouts", params={"run": "live"}).json()["data"] == []  # no session opened


async def live_key_of(database_url: str, user: str) -> str:
    """A live key of ``user`` in the gateway's store, as `harnessrl keys create` makes one."""
    from store.store import Store

    store = Store.from_url(database_url)
    try:
        key, _ = await store.live_keys.create(user)
    finally:
        await store.close()
    return key


FLOODER = r"""
import json, socket, time

def status_of(s):
    try:
        head = s.recv(65536)
    except socket.timeout:
        return None
    return int(head.split()[1]) if head else None

def flood(count):
    # slow bodies: a million bytes promised, nine sent; the bridge holds its cap of them, refuses the rest
    sockets, refused = [], 0
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=20)
        s.sendall(SLOW.encode())
        sockets.append(s)
    for s in sockets:
        s.settimeout(5)
        refused += status_of(s) == 429
    for s in sockets:
        s.close()
    return refused

def own_call_after(deadline_s):
    # the agent's own call goes through again once its connections are closed (429s say Retry-After)
    until = time.monotonic() + deadline_s
    while True:
        status = send(OWN, False)
        if status != [429] or time.monotonic() > until:
            return status
        time.sleep(1)

results = {name: send(raw, unix) for name, (raw, unix) in ATTACKS.items()}
results["flood: refused"] = flood(FLOOD)
results["own call after the flood"] = own_call_after(120)
print(json.dumps(results))
"""
FLOOD = 80  # connections, above the bridge's per-sandbox cap (sandboxes/bridge_limits.py MAX_CONNECTIONS = 64)


def bad_inputs(port: int, own: dict) -> dict[str, tuple[str, bool]]:
    """Model requests no client should send, on the agent's own route: each must be a 4xx, never a 5xx."""
    host, mine = f"127.0.0.1:{port}", f"/r/{own['token']}/v1"

    def chat(raw_body: str, content_type: str = "application/json") -> str:
        return (
            f"POST {mine}/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(raw_body)}\r\nconnection: close\r\n\r\n{raw_body}"
        )

    messages = '"messages": [{"role": "user", "content": "hi"}]'
    return {
        "huge integer": (chat(f'{{"model": "policy", "seed": {"9" * 5000}, {messages}}}'), False),
        "lone surrogate": (chat('{"model": "policy", "messages": [{"role": "user", "content": "\\udfff"}]}'), False),
        "text/plain body": (chat(f'{{"model": "policy", {messages}}}', "text/plain"), False),
    }


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_attacking_agents_bad_input_and_connection_flood_are_refused_on_its_own_connections(
    backend, gateway, engine_server
):
    engine: FakeEngine = engine_server.app.state.engine
    with admin(gateway) as http:
        own = http.post("/api/rollouts", json={"run": RUN, "task": "t", "group": "g2", "group_size": 1}).json()
    host, mine = f"127.0.0.1:{gateway.port}", f"/r/{own['token']}/v1"
    chat = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    slow = (
        f"POST {mine}/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f'content-length: 1000000\r\n\r\n{{"model":'
    )
    program = f"PORT = {gateway.port}\nSOCKET = {SOCKET_INSIDE!r}\nFLOOD = {FLOOD}\nSLOW = {slow!r}\n"
    program += f"OWN = {request('POST', f'{mine}/chat/completions', host, chat)!r}\n"
    program += f"ATTACKS = {bad_inputs(gateway.port, own)!r}\n{SENDER.rsplit('print(', 1)[0]}{FLOODER}"
    engine.script = lambda body: FakeReply(content=program if len(body["messages"]) == 1 else "Done.")
    engine.requests = []

    spec = backend_spec(backend, gateway_url=own["base_url"], files={"agent.py": AGENT.encode()})
    async with await create_backend(backend, spec) as sandbox:
        ran = await sandbox.exec(["python3", "agent.py"], timeout_s=600)
    assert ran.ok, ran.text()
    outcome = json.loads(ran.stdout)
    assert outcome["final"] == "Done.", outcome
    results = json.loads(outcome["attacks"])
    assert {k: results[k] for k in ("huge integer", "lone surrogate", "text/plain body")} == {
        "huge integer": [400],
        "lone surrogate": [400],
        "text/plain body": [415],
    }, outcome["errors"]
    assert results["flood: refused"] >= FLOOD - 64, outcome["errors"]  # over the cap: 429 on its own connections
    assert results["own call after the flood"] == [200], outcome["errors"]
