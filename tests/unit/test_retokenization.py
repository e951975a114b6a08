"""Re-tokenization skew: a call whose prompt is not what the chat template renders from its messages,
or whose sampled ids are not what its text encodes to, is counted per harness and model; calls a text
pipeline would reproduce are not."""

from __future__ import annotations

import asyncio

import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.reports.retokenization import output_round_trip, rerendered_prompt, retokenization_skew
from store.store import Store
from tests.builders import call_record

MESSAGES = [{"role": "user", "content": "write hello to a file"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def spelled_out(tokenizer, text: str) -> list[int]:
    """``text`` as one token per character: decodes to ``text``, which encodes to fewer tokens."""
    return [i for c in text for i in tokenizer.encode(c, add_special_tokens=False)]


async def plant(store: Store, tokenizer) -> None:
    """pi: a faithful call, one with a re-templated prompt, one with a spelled-out output; opencode: a
    Messages-dialect call (not re-rendered) and a teacher call (not the policy's: not read)."""
    rendered = rerendered_prompt(tokenizer, {"messages": MESSAGES})
    canonical = tokenizer.encode("hello world", add_special_tokens=False)
    planted = (
        ("pi", "chat", rendered, canonical, "policy"),
        ("pi", "chat", rendered[:-1] + [rendered[-1] + 1], canonical, "policy"),
        ("pi", "chat", rendered, spelled_out(tokenizer, "hello world"), "policy"),
        ("opencode", "messages", rendered, canonical, "policy"),
        ("opencode", "chat", rendered[:-1], spelled_out(tokenizer, "hi there"), "teacher"),
    )
    for harness, dialect, prompt, output, source in planted:
        rollout = (await store.create_rollout("skew", "t", None, {"harness": harness})).rollout_id
        record = call_record(
            rollout, prompt_ids=prompt, output_ids=output, output_logprobs=[-1.0] * len(output), dialect=dialect,
            request={"model": "policy", "messages": MESSAGES}, source=source,
        )  # fmt: skip
        await store.insert_calls([record])


def test_a_text_round_trip_of_a_spelled_out_word_gives_other_ids(tokenizer):
    canonical = tokenizer.encode("hello world", add_special_tokens=False)
    assert output_round_trip(tokenizer, canonical) == canonical
    assert output_round_trip(tokenizer, spelled_out(tokenizer, "hello world")) == canonical


def test_tool_call_arguments_are_rendered_as_the_template_expects_them(tokenizer):
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    request = {"messages": [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call]}]}
    assert rerendered_prompt(tokenizer, request) is not None
    assert rerendered_prompt(tokenizer, {"input": "no messages"}) is None


async def test_skewed_prompts_and_outputs_are_counted_per_harness_and_model(sqlite_db, tokenizer):
    store = Store.from_url(sqlite_db)
    try:
        await plant(store, tokenizer)
        calls = await store.health.latest_policy_calls(await store.listings.run_id("skew"), limit=10)
    finally:
        await store.close()
    rows = retokenization_skew(tokenizer, calls)
    assert [(r.harness, r.calls, r.rendered, r.prompt_skewed, r.output_skewed) for r in rows] == [
        ("opencode", 1, 0, 0, 0),  # its Messages call is not re-rendered; the teacher's is not the policy's
        ("pi", 3, 3, 1, 1),
    ]
    assert rows[1].prompt_share == pytest.approx(1 / 3)


def test_health_with_a_model_prints_the_skew_table(sqlite_db, tokenizer, tiny_model_dir):
    async def planted() -> None:
        store = Store.from_url(sqlite_db)
        try:
            await plant(store, tokenizer)
        finally:
            await store.close()

    asyncio.run(planted())
    args = ["health", "--run", "skew", "--database-url", sqlite_db]
    result = CliRunner().invoke(app, [*args, "--model", str(tiny_model_dir)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "re-tokenization skew of run 'skew'" in result.output and "1 (33.3%)" in result.output
    missing = CliRunner().invoke(app, [*args, "--model", str(tiny_model_dir.parent)], env={"COLUMNS": "300"})
    assert missing.exit_code != 0 and "holds no tokenizer" in missing.output
