"""Peak RSS of one learner step on one sample of L tokens, tiny Qwen2 + LoRA, in this process.

Usage: python learner_memory_probe.py L new|previous  -> one JSON line {"base_mb", "peak_mb"}.
Run as a subprocess by test_learner_memory (ru_maxrss is per process).
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from learner.packing import pack_samples
from learner.step import StepConfig, accumulate_gradients
from tests.learner_builders import VOCAB, lora_model, previous_path_backward, sample_of


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    length, path = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    model = lora_model()
    model.train()
    model.base_model.model.config.max_position_embeddings = length
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, length)
    mask = np.zeros(length, np.int8)
    mask[length // 4 :] = 1
    sample = sample_of(ids, mask, np.full(length, -4.0))
    with torch.no_grad():  # warm up the allocator and kernels on a short row
        model(input_ids=torch.tensor([[1, 2, 3]]))
    base = rss_mb()
    if path == "new":
        accumulate_gradients(model, list(pack_samples([sample], [1.0], length).rows), StepConfig())
    else:
        previous_path_backward(model, [sample], [1.0])
    print(json.dumps({"length": length, "path": path, "base_mb": base, "peak_mb": rss_mb()}))


if __name__ == "__main__":
    main()
