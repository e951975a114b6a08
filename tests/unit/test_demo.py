"""`harnessrl demo`'s rollout: a tool-using chat through the gateway, its calls read back through the
one gateway client."""

from __future__ import annotations

from harnessrl.engine.demo import one_recorded_rollout
from harnessrl.server import BackgroundGateway
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply


def weather_script(body: dict) -> FakeReply:
    if any(m["role"] == "tool" for m in body["messages"]):
        return FakeReply(content="It is sunny in Paris.")
    return FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),))


async def test_the_demo_rollout_records_the_tool_call_and_the_answer(sqlite_db, fake_engine, fake_engine_server):
    fake_engine.script = weather_script
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        rollout_id, calls = await one_recorded_rollout(gateway.url, TEST_ADMIN_KEY)
    assert len(calls) == 2 and all(call["rollout_id"] == rollout_id for call in calls)
    assert all(call["output_ids"] and len(call["output_logprobs"]) == len(call["output_ids"]) for call in calls)
