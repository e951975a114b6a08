import json
import os
from pathlib import Path

import pytest

from harnessrl.engine import model_prep
from harnessrl.engine.model_prep import TEMPLATE_PATH, build_tiny_model, chat_template_path, prepare_smollm2

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]


def _call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# Each assistant turn is paired with the raw text the model would have generated for it.
CONVERSATION = [
    ({"role": "system", "content": "You are a coding agent."}, None),
    (
        {
            "role": "user",
            "content": [{"type": "text", "text": "Look at a.txt"}, {"type": "text", "text": "then b.txt"}],
        },
        None,
    ),
    (
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("read_file", '{"path": "a.txt"}', "c1"), _call("read_file", {"path": "b.txt"}, "c2")],
        },
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "b.txt"}}\n</tool_call>',
    ),
    ({"role": "tool", "tool_call_id": "c1", "content": "alpha"}, None),
    ({"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "beta"}]}, None),
    (
        {
            "role": "assistant",
            "content": "Now I count.",
            "tool_calls": [_call("bash", {"command": "wc -c a.txt"}, "c3")],
        },
        'Now I count.\n<tool_call>\n{"name": "bash", "arguments": {"command": "wc -c a.txt"}}\n</tool_call>',
    ),
    ({"role": "tool", "tool_call_id": "c3", "content": "5 a.txt"}, None),
    ({"role": "assistant", "content": "a.txt has 5 bytes."}, "a.txt has 5 bytes."),
    ({"role": "user", "content": "Thanks, and b?"}, None),
    ({"role": "assistant", "content": [{"type": "text", "text": "Also 4."}]}, "Also 4."),
]


def render(messages, tools=None, add_generation_prompt=False):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=TEMPLATE_PATH.read_text(),
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0]


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
def test_template_is_prefix_preserving(tools):
    messages = [m for m, _ in CONVERSATION]
    full = render(messages, tools)
    checked = 0
    for k, (message, reply) in enumerate(CONVERSATION):
        if message["role"] != "assistant":
            continue
        prompt = render(messages[:k], tools, add_generation_prompt=True)
        assert prompt.endswith("<|im_start|>assistant\n")
        turn = prompt + reply + "<|im_end|>"
        assert full.startswith(turn), (k, turn[-200:], full[len(prompt) - 50 : len(turn) + 50])
        assert render(messages[: k + 1], tools) == turn + "\n"
        checked += 1
    assert checked == 4


def test_template_layout():
    messages = [m for m, _ in CONVERSATION]
    text = render(messages, TOOLS)
    assert text.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools\n")
    tools_block = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert [json.loads(line) for line in tools_block] == TOOLS
    assert (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nalpha\n</tool_response>\n"
        "<tool_response>\nbeta\n</tool_response><|im_end|>\n"
    ) in text
    assert "Look at a.txt\nthen b.txt" in text
    assert text.count("<|im_start|>system") == 1
    # No default system prompt, with or without tools.
    assert render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n"
    assert render([{"role": "user", "content": "hi"}], TOOLS).startswith("<|im_start|>system\n# Tools\n")
    assert render([], add_generation_prompt=True) == "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_tiny_model_loads_and_tokenizes(tiny_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_dir)
    assert config.head_dim == 64 and config.max_position_embeddings == 131072
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert len(tok) == config.vocab_size
    for token in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", *model_prep.TOOL_TOKENS]:
        ids = tok.encode(f"a{token}b", add_special_tokens=False)
        assert tok.convert_tokens_to_ids(token) in ids, token
        assert tok.decode(ids) == f"a{token}b"
    # Tool tags survive skip_special_tokens (the hermes parser reads them from text).
    ids = tok.encode("<|im_start|>x<tool_call>y</tool_call>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "x<tool_call>y</tool_call>"
    assert tok.encode("hello", add_special_tokens=True) == tok.encode("hello", add_special_tokens=False)

    assert chat_template_path(tiny_dir).read_text() == TEMPLATE_PATH.read_text()
    messages = [{"role": "user", "content": "hi"}]
    expected = render(messages, add_generation_prompt=True)
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.dtype == torch.bfloat16
    input_ids = torch.tensor([tok.encode("def f(x):\n    return x")])
    logits = model(input_ids).logits
    assert logits.shape == (1, input_ids.shape[1], config.vocab_size)
    assert torch.isfinite(logits.float()).all()


def test_tiny_model_is_deterministic(tiny_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again")
    names = sorted(p.name for p in tiny_dir.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (tiny_dir / name).read_bytes() == (again / name).read_bytes(), name
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    # Rebuilding in place replaces the folder and leaves no temp siblings.
    build_tiny_model(again, max_position_embeddings=4096)
    assert json.loads((again / "config.json").read_text())["max_position_embeddings"] == 4096
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "other"]
    # A foreign non-empty folder is never replaced.
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        build_tiny_model(tmp_path / "foreign")
    assert (tmp_path / "foreign" / "keep.txt").read_text() == "x"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def _fake_cache(root: Path) -> Path:
    gguf = model_prep.smollm2_gguf_path()
    dest = root / model_prep.SMOLLM2_DIRNAME
    dest.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (dest / name).write_text("{}")
    (dest / "chat_template.jinja").write_text(TEMPLATE_PATH.read_text())
    st = gguf.stat()
    model_prep._write_marker(
        dest, source={"file": gguf.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": "x"}
    )
    return dest


def forbid_work(monkeypatch, hashing: bool = True) -> None:
    """A valid cache is used as it is: not converted again, nor (``hashing``) even hashed, whatever the clock
    says. A cache another checkout made (the same GGUF with another mtime) is hashed once per check."""

    def forbidden(*args):
        raise AssertionError("a valid cache was hashed or converted again")

    if hashing:
        monkeypatch.setattr(model_prep, "_sha256", forbidden)
    monkeypatch.setattr(model_prep, "_convert_smollm2", forbidden)


def test_prepare_smollm2_is_a_noop_on_a_valid_cache(tmp_path, monkeypatch):
    dest = _fake_cache(tmp_path)
    forbid_work(monkeypatch)
    assert prepare_smollm2(tmp_path) == dest
    assert (dest / "config.json").read_text() == "{}"  # untouched


def test_prepare_smollm2_detects_stale_caches(tmp_path, monkeypatch):
    dest = _fake_cache(tmp_path)
    gguf = model_prep.smollm2_gguf_path()
    assert model_prep._marker_matches(dest, gguf)
    marker = json.loads((dest / model_prep.MARKER_NAME).read_text())
    marker["template_sha256"] = "0" * 64
    (dest / model_prep.MARKER_NAME).write_text(json.dumps(marker))
    assert not model_prep._marker_matches(dest, gguf)
    _fake_cache(tmp_path / "b")
    (tmp_path / "b" / model_prep.SMOLLM2_DIRNAME / "model.safetensors").unlink()
    assert not model_prep._marker_matches(tmp_path / "b" / model_prep.SMOLLM2_DIRNAME, gguf)
    # A moved mtime falls back to the sha256, which the fake marker does not have.
    _fake_cache(tmp_path / "c")
    monkeypatch.setattr(model_prep, "_sha256", lambda path: "y")
    marker_path = tmp_path / "c" / model_prep.SMOLLM2_DIRNAME / model_prep.MARKER_NAME
    marker = json.loads(marker_path.read_text())
    marker["source"]["mtime_ns"] -= 1
    marker_path.write_text(json.dumps(marker))
    assert not model_prep._marker_matches(marker_path.parent, gguf)
    marker["source"]["sha256"] = "y"
    marker_path.write_text(json.dumps(marker))
    assert model_prep._marker_matches(marker_path.parent, gguf)


def test_prepare_smollm2_converts(tmp_path_factory, monkeypatch):
    """Real conversion (~20 s on 2 cores) into the shared cache; a no-op once it is there."""
    from transformers import AutoConfig, AutoTokenizer

    cache = Path(os.environ.get("HARNESSRL_TEST_MODEL_CACHE", model_prep.default_cache_root()))
    dest = prepare_smollm2(cache)
    with monkeypatch.context() as patched:
        forbid_work(patched, hashing=False)
        assert prepare_smollm2(cache) == dest
    config = AutoConfig.from_pretrained(dest)
    assert config.model_type == "llama" and config.vocab_size == 49152
    assert getattr(config, "quantization_config", None) is None
    tok = AutoTokenizer.from_pretrained(dest)
    messages = [{"role": "user", "content": "hi"}]
    expected = render(messages, add_generation_prompt=True)
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
    assert chat_template_path(dest).read_text() == TEMPLATE_PATH.read_text()
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_a_stretched_context_keeps_the_models_short_range_reading_and_reaches_past_its_positions(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    base = build_tiny_model(tmp_path / "base", max_position_embeddings=256)
    stretched = model_prep.stretch_context(base, 1024)
    assert stretched == tmp_path / "base-1024" and model_prep.stretch_context(base, 200) == base
    config = AutoConfig.from_pretrained(stretched)
    assert config.max_position_embeddings == 1024
    assert config.rope_parameters["rope_type"] == "llama3" and config.rope_parameters["factor"] == 4.0
    assert (stretched / "model.safetensors").stat().st_ino == (base / "model.safetensors").stat().st_ino
    mtime = (stretched / "config.json").stat().st_mtime_ns
    assert model_prep.stretch_context(base, 1024) == stretched  # cached
    assert (stretched / "config.json").stat().st_mtime_ns == mtime

    ids = torch.randint(0, 1000, (1, 600), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)(ids[:, :16]).logits
        after_model = AutoModelForCausalLM.from_pretrained(stretched, dtype=torch.float32)
        short, long = after_model(ids[:, :16]).logits, after_model(ids).logits
    assert (short - before).abs().max() < 0.05 * before.abs().max()  # high frequencies untouched
    assert not torch.equal(short, before)  # the slow ones are stretched
    assert torch.isfinite(long).all() and long.shape[1] == 600
