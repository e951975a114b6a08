"""Each agent's declared first-prompt size stays true to its recorded first request, and `run` warns when
the engine's context is shorter (its rollouts would fail before a first answer)."""

from __future__ import annotations

import json

import pytest

from harnesses.registry import create_harness
from rollouts.launch import context_warning
from tests.first_requests import FIXTURES, HARNESSES, INSTRUCTION

PROMPT_PARTS = ("system", "instructions", "messages", "input", "tools")


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from harnessrl.engine.model_prep import prepare_smollm2

    return AutoTokenizer.from_pretrained(prepare_smollm2())


@pytest.mark.parametrize("name", HARNESSES)
def test_the_declared_first_prompt_size_is_within_a_tenth_of_the_recorded_one(name, smollm2_tokenizer):
    body = json.loads((FIXTURES / f"{name}.json").read_text())["body"]
    parts = {key: body[key] for key in PROMPT_PARTS if key in body}
    recorded = len(smollm2_tokenizer.encode(json.dumps(parts, ensure_ascii=False)))
    assert create_harness(name).first_prompt_tokens == pytest.approx(recorded, rel=0.1)


@pytest.mark.parametrize("name", HARNESSES)
def test_the_declared_tokens_after_the_task_are_within_a_tenth_of_the_recorded_ones(name, smollm2_tokenizer):
    # What follows the task in the first prompt is each sample's own: the learner's rows make room for it.
    body = json.loads((FIXTURES / f"{name}.json").read_text())["body"]
    messages = body.get("messages") or body["input"]
    task_at = max(i for i, message in enumerate(messages) if INSTRUCTION in json.dumps(message))
    after = messages[task_at + 1 :]
    recorded = len(smollm2_tokenizer.encode(json.dumps(after, ensure_ascii=False))) if after else 0
    assert create_harness(name).tokens_after_task == pytest.approx(recorded, rel=0.1)


class Gateway:
    def __init__(self, max_model_len: int | None):
        self.max_model_len = max_model_len

    async def policy(self) -> dict:
        return {"max_model_len": self.max_model_len}


async def test_run_warns_when_the_first_prompt_is_longer_than_the_engines_context():
    warning = await context_warning(Gateway(4096), create_harness("opencode"))
    assert "opencode's first prompt is about 7,700 tokens" in warning and "context of 4,096" in warning
    assert "--max-model-len" in warning


@pytest.mark.parametrize(("harness", "context"), [("pi", 4096), ("opencode", 8192), ("builtin", 512), ("pi", None)])
async def test_run_says_nothing_when_it_fits_or_a_size_is_unknown(harness, context):
    assert await context_warning(Gateway(context), create_harness(harness)) is None
