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

from gateway.engine.fake import FakeEngine, FakeReply, create_fake_engine_app
from gateway.settings import GatewaySettings
from harnessrl.server import BackgroundGateway, BackgroundServer
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


def attacks(port: int, own: dict, sibling: dict) -> dict[str, tuple[str, bool]]:
    """name -> (raw request bytes as text, sent to the gateway socket directly)."""
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
async def test_an_attacking_agent_reaches_only_its_own_model_endpoints(backend, gateway, engine_server):
    engine: FakeEngine = engine_server.app.state.engine
    with admin(gateway) as http:
        own, sibling = (
            http.post("/api/rollouts", json={"run": RUN, "task": "t", "group": "g", "group_size": 2}).json()
            for _ in range(2)
        )
    program = f"PORT = {gateway.port}\nSOCKET = {SOCKET_INSIDE!r}\n"
    program += f"ATTACKS = {attacks(gateway.port, own, sibling)!r}\n{SENDER}"
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
