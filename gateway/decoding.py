"""Token ids back to text with the model's tokenizer: whole texts and per-token pieces.

One decoder for the REST API (``decode=true``), ``harnessrl show`` and ``harnessrl export``.
It reads ``tokenizer.json`` with the Rust ``tokenizers`` library directly: decoding does not depend
on the pre-tokenizer rules transformers may rebuild (those only matter for encoding, see
``gateway.tito.template``), and it needs neither a chat template nor the transformers import.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"


def tokenizer_folder(*candidates: str | Path | None) -> Path | None:
    """The first candidate folder that holds a ``tokenizer.json``."""
    for folder in candidates:
        if folder and Path(folder, TOKENIZER_FILE).is_file():
            return Path(folder)
    return None


class TokenDecoder:
    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, folder: str | Path) -> TokenDecoder:
        path = Path(folder, TOKENIZER_FILE)
        if not path.is_file():
            raise FileNotFoundError(f"{folder} has no {TOKENIZER_FILE}")
        return cls(Tokenizer.from_file(str(path)))

    def decode(self, ids: Sequence[int]) -> str:
        # Special tokens stay visible: a trajectory viewer must show <|im_end|> and tool-call markers.
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """One string per id: what that token contributes to the text.

        Byte-level BPE splits multi-byte characters across tokens; such a token decodes alone to
        U+FFFD, which is what a per-token view can honestly show for it.
        """
        return self.tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
