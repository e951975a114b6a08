"""The real Claude Code and Codex CLI binaries (pinned), in sandboxes, driven through a real gateway.

A scripted engine stands in for the model and drives each agent through its own tools: Claude Code's
`Write` tool, Codex's `exec_command`; asked again after the tool ran, it answers "Done.". Each rollout
runs through the runner end to end in docker and in bubblewrap: the file is written, the verifier
(which also checks the final answer the adapter extracted) scores 1, every engine call is recorded
under the rollout with exact ids, and side calls (none in runs this short) are tagged; the one side
call of a headless run, compaction, is forced in test_claude_code_codex_compaction.py. In tito
capture mode the same multi-turn rollouts give one sample and no forks.

They need the agents installed on the host and their images built (tests/setup_machine.sh does both).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from gateway.tito.template import ModelText
from harnesses.agents import create
from harnesses.task import Task
from harnessrl.server import BackgroundGateway
from sandboxes import WORKSPACE
from sandboxes.kinds import KINDS
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings, run_single_rollout
from tests.fake_engine import FakeEngine
from tests.fake_tokens import FakeReply, decode, encode

AGENTS = ("claude-code", "codex")
TASK = Task(
    name="hello-file",
    instruction="Create a file hello.txt in the current directory containing exactly: hello",
    verifier='test "$(cat hello.txt)" = hello && grep -qx Done. /logs/agent/final.txt',
    agent_timeout_s=300.0,
    verifier_timeout_s=60.0,
)
# The agent's own tool, called to write the file: (tool name, arguments).
WRITES = {
    "Write": {"file_path": f"{WORKSPACE}/hello.txt", "content": "hello"},
    "exec_command": {"cmd": f"printf hello > {WORKSPACE}/hello.txt"},
}


def planned_write(tool_names: set[str]) -> tuple[str, dict]:
    name = next((n for n in WRITES if n in tool_names), None)
    assert name, f"no known writing tool among {sorted(tool_names)}"
    return name, WRITES[name]


def chat_script(body: dict) -> FakeReply:
    """Engine capture: the gateway hands the engine chat bodies."""
    if not body.get("tools"):
        return FakeReply(content="Hello file")  # a side call
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    if any(m["role"] == "tool" for m in messages[last_user:]):
        return FakeReply(content="Done.")
    return FakeReply(tool_calls=(planned_write({t["function"]["name"] for t in body["tools"]}),))


def tito_script(text: ModelText):
    """Tito capture: the engine gets token ids; the rendered prompt says where the rollout is."""

    def script(body: dict) -> FakeReply:
        prompt = text.decode(body["prompt"])
        if "<tools>" not in prompt:
            return FakeReply(content="Hello file")
        if "<tool_response>" in prompt:  # the tool ran: its result is in the prompt
            return FakeReply(content="Done.")
        names = {n for n in WRITES if f'"name": "{n}"' in prompt}
        return FakeReply(tool_calls=(planned_write(names),))

    return script


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = chat_script, []
    fake.encode_text, fake.decode_ids = encode, decode
    return fake


def local_harness(name: str):
    assert shutil.which("bwrap"), "bubblewrap missing: run tests/setup_machine.sh"
    harness = create(name, sandbox="local")
    harness.host_install()  # AgentNotInstalled names the install command
    return harness


def rollout_api(gateway: BackgroundGateway, rollout_id: int, what: str = "") -> dict | list:
    response = http.get(
        f"{gateway.url}/api/rollouts/{rollout_id}{what}",
        headers=ADMIN_HEADERS,
        params={"limit": 1000} if what else None,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    return body["data"] if what else body


def call_details(gateway: BackgroundGateway, rollout_id: int) -> list[dict]:
    return [
        http.get(f"{gateway.url}/api/calls/{c['id']}", headers=ADMIN_HEADERS, timeout=30).json()
        for c in rollout_api(gateway, rollout_id, "/calls")
    ]


def check_recorded(gateway: BackgroundGateway, engine: FakeEngine, rollout_id: int, dialect: str) -> list[dict]:
    calls = call_details(gateway, rollout_id)
    assert len(calls) == len(engine.requests)  # every engine call belongs to this rollout
    assert {c["dialect"] for c in calls} == {dialect}
    main = [c for c in calls if c["request"].get("tools")]
    assert len(main) >= 2, "expected the tool call and the final answer"
    assert all(c["tags"] == [] for c in main)
    assert all(c["tags"] for c in calls if not c["request"].get("tools"))
    for call in calls:
        assert len(call["output_ids"]) == len(call["output_logprobs"]) > 0 and call["prompt_ids"]
    return calls


DIALECTS = {"claude-code": "messages", "codex": "responses"}


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_in_local_sandbox_writes_the_file_and_scores_one(name, gateway, engine):
    result = await run_single_rollout(
        local_harness(name), gateway.url, f"real-{name}-local", TASK, "local", {"isolation": "bwrap"}
    )
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    check_recorded(gateway, engine, result.rollout_id, DIALECTS[name])


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_in_docker_sandbox_writes_the_file_and_scores_one(name, gateway, engine):
    harness = create(name, sandbox="docker")
    result = await run_single_rollout(harness, gateway.url, f"real-{name}-docker", TASK, "docker", {})
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    check_recorded(gateway, engine, result.rollout_id, DIALECTS[name])


def test_gateway_records_what_the_agent_sent_that_it_did_not_serve(gateway, engine):
    """Nothing the pinned agents send is unknown to the gateway; Codex's hosted web_search is left out."""
    # Uses the first requests kept as fixtures; the compatibility tests replay them in full.
    from tests.first_requests import load_first_request

    for name in AGENTS:
        fixture = load_first_request(name)
        assert fixture["notes"].get("ignored_fields", []) == [], (name, fixture["notes"])
    assert load_first_request("codex")["notes"]["left_out_tools"] == ["web_search"]


@pytest.fixture
def tito_gateway(sqlite_db, engine_server, engine, tiny_model_dir) -> Iterator[BackgroundGateway]:
    text = ModelText(tiny_model_dir)
    engine.encode_text, engine.decode_ids, engine.script = text.encode, text.decode, tito_script(text)
    with BackgroundGateway(gateway_settings(sqlite_db, engine_server.url, model_dir=str(tiny_model_dir))) as gw:
        yield gw


@pytest.mark.parametrize("name", AGENTS)
async def test_tito_rollout_of_the_agent_is_one_sample_without_forks(name, tito_gateway, engine):
    from contracts.gateway_client import GatewayClient
    from rollouts.run_plan import RunPlan
    from rollouts.runner import Runner
    from sandboxes import Limits, SandboxSpec

    plan = RunPlan(
        run=f"tito-{name}",
        tasks=[TASK],
        harness=local_harness(name),
        group_size=1,
        concurrency=1,
        sandbox=KINDS["local"],
        sandbox_options={"isolation": "bwrap"},
        capture="tito",
        base_spec=SandboxSpec(limits=Limits(memory_bytes=2 * 2**30, cpus=1.0)),
    )
    client = GatewayClient(tito_gateway.url, TEST_ADMIN_KEY)
    try:
        [result] = await Runner(plan, client).run()
    finally:
        await client.close()
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    view = rollout_api(tito_gateway, result.rollout_id)
    calls = rollout_api(tito_gateway, result.rollout_id, "/calls")
    assert len(calls) >= 2
    assert view["graph"]["roots"] == 1 and view["graph"]["forks"] == 0 and view["graph"]["drift_tokens"] == 0
    [sample] = rollout_api(tito_gateway, result.rollout_id, "/samples")
    assert sample["input_ids"] == calls[-1]["prompt_ids"] + calls[-1]["output_ids"]
    assert json.loads(json.dumps(sample))  # the sample is plain JSON


def subagent_script(body: dict) -> FakeReply:
    """Codex's root agent calls its namespaced spawn_agent; the subagent answers; the root ends."""
    messages = body["messages"]
    if any(m["role"] == "tool" for m in messages):
        return FakeReply(content="Done.")
    if "probe-child" in json.dumps(messages):
        return FakeReply(content="child says hi")
    if "spawn_agent" in {t["function"]["name"] for t in body.get("tools") or []}:
        return FakeReply(tool_calls=(("spawn_agent", {"message": "probe-child: say hi"}),))
    return FakeReply(content="Done.")


async def test_codex_runs_the_namespaced_call_it_gets_back(gateway, engine):
    """A call to a function of a namespace tool goes back as Codex expects it: Codex runs it (starts the
    subagent) and returns its output on a function_call that names the namespace."""
    engine.script = subagent_script
    task = Task(name="spawn", instruction="Spawn a helper agent.", verifier="true", agent_timeout_s=240.0)
    result = await run_single_rollout(
        local_harness("codex"), gateway.url, "codex-namespace", task, "local", {"isolation": "bwrap"}
    )
    assert result.status == "finished", result.error
    inputs = [call["request"]["input"] for call in call_details(gateway, result.rollout_id)]
    calls = [item for items in inputs for item in items if item.get("type") == "function_call"]
    seen = [[(i.get("type"), i.get("role") or i.get("name")) for i in items[-3:]] for items in inputs]
    assert calls, f"no function_call came back; the calls' last input items: {seen}"
    assert calls[0]["name"] == "spawn_agent" and calls[0]["namespace"] == "multi_agent_v1"
    outputs = [item for items in inputs for item in items if item.get("type") == "function_call_output"]
    assert "agent_id" in json.loads(outputs[0]["output"])  # Codex started the subagent
    assert any("probe-child" in json.dumps(items) for items in inputs[1:])  # whose own call was recorded too


def first_main_prompt(requests: list[dict]) -> str:
    """The system text and tools of the first call with tools: the prefix every turn extends."""
    body = next(r for r in requests if r.get("tools"))
    system = [m.get("content") for m in body["messages"] if m["role"] in ("system", "developer")]
    return json.dumps([system[:1], body["tools"]], sort_keys=True)


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_prompt_prefix_is_shared_by_rollouts_of_different_tasks(name, gateway, engine):
    """The system prompt's head and the tools do not vary per rollout or per task (no session ids, task
    hashes or times in them), so vLLM's prefix cache computes them once for every group."""
    prompts = []
    for index, instruction in enumerate(("Create hello.txt containing hello", TASK.instruction)):
        engine.requests = []
        task = Task(name=f"prefix-{index}", instruction=instruction, verifier="true", agent_timeout_s=240.0)
        result = await run_single_rollout(
            local_harness(name), gateway.url, f"prefix-{name}-{index}", task, "local", {"isolation": "bwrap"}
        )
        assert result.status == "finished", result.error
        prompts.append(first_main_prompt(engine.requests))
    assert prompts[0] == prompts[1]
