"""A model folder's tokenizer as transformers (and so vLLM) configures it: the one loader of everything
that encodes text or applies the chat template (tito capture, the teacher's rendering, the trajectory
table of ``harnessrl demo``, ``harnessrl health --model``).

Decoding ids back to text needs less and reads ``tokenizer.json`` directly (``gateway.decoding``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONFIG_FILE = "tokenizer_config.json"


class TokenizerMissing(FileNotFoundError):
    """The folder holds no tokenizer; the message names the fix."""


def model_tokenizer(model_dir: str | Path) -> Any:
    """transformers' tokenizer of ``model_dir`` (a ``PreTrainedTokenizerBase``); ``TokenizerMissing`` when
    the folder has none (transformers would take a missing folder for a hub id and fail obscurely)."""
    if not Path(model_dir, CONFIG_FILE).is_file():
        raise TokenizerMissing(
            f"{model_dir} holds no tokenizer (no {CONFIG_FILE}); give the model folder the engine serves"
        )
    from transformers import AutoTokenizer  # heavy: imported only when a tokenizer is needed

    return AutoTokenizer.from_pretrained(str(model_dir))
