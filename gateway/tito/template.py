"""The model's chat template (rendered here with Jinja, not transformers) and its tokenizer (as
transformers configures it: ``gateway.model_tokenizer``).

The Jinja environment mirrors Hugging Face's ``apply_chat_template`` (trim/lstrip blocks, a
non-escaping ``tojson``), so the gateway renders exactly what vLLM renders from the same file.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Encoding, Tokenizer

from gateway.model_tokenizer import model_tokenizer


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    raise jinja2.exceptions.TemplateError(message)


class ChatTemplate:
    def __init__(self, source: str, special: dict[str, str]):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(source)
        self._special = special  # bos_token, eos_token, ... as templates expect them

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False) -> str:
        return self._template.render(
            messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt, **self._special
        )


class ModelText:
    """Template + tokenizer of one model folder: text in, token ids out (no special tokens added)."""

    def __init__(self, model_dir: Path):
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "tokenizer_config.json").read_text())
        template_file = model_dir / "chat_template.jinja"
        source = template_file.read_text() if template_file.exists() else config.get("chat_template")
        if not source:
            raise FileNotFoundError(f"{model_dir} has no chat template (chat_template.jinja)")
        special = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        self.template = ChatTemplate(source, {k: v for k, v in special.items() if v is not None})
        self.tokenizer = _backend_tokenizer(model_dir)
        self._spans = _untrimmed(self.tokenizer)
        eos = special.get("eos_token")
        self.eos_id = self.tokenizer.token_to_id(eos) if eos else None
        self.eos_text = eos

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encoding(self, text: str) -> Encoding:
        """``text`` encoded with each token's character span (``offsets``) untrimmed: the same ids as
        ``encode``, and spans that tile the text (token roles read them: ``gateway.tito.roles``)."""
        return self._spans.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def _backend_tokenizer(model_dir: Path) -> Tokenizer:
    """The Rust tokenizer exactly as transformers (and so vLLM) configures it.

    transformers may rebuild a tokenizer's pre-tokenizer from its class (Qwen2's newline rule, for
    one), so ``tokenizer.json`` read directly can split text differently from the engine.
    """
    return model_tokenizer(model_dir).backend_tokenizer


def _untrimmed(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer``, or a copy whose post-processor does not trim spaces off the tokens' offsets (a
    byte-level ``trim_offsets``: a token of spaces would cover no character). The post-processor adds
    no id to text encoded without special tokens, so the copy's ids are the same."""
    if "trim_offsets=True" not in repr(tokenizer.post_processor):
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.post_processor = None
    return copy


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # {"content": "<|im_end|>", ...} in some configs
        return value.get("content")
    return value
