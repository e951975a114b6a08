#!/usr/bin/env bash
# The learner on a machine with one CUDA GPU and no network. Run from the repository root:
#   bash tests/gpu/check.sh [MODEL_DIR]
#
# What it needs on the machine (nothing is downloaded):
#   - a Python with the GPU install: `pip install '.[gpu]' -c constraints/gpu.txt` (torch 2.14.0 CUDA,
#     transformers 5.20.2, peft), made where there is network; optional flash-attn
#     (`pip install flash-attn --no-build-isolation`) for the varlen kernel, else SDPA per node;
#     PYTHON=... picks it (default: .venv/bin/python, then python3);
#   - the model as a Hugging Face folder: MODEL_DIR, default tests/gpu/model (carry SmolLM2-135M, the
#     folder `harnessrl models prepare` prints, ~270 MB in bf16: copy it there or pass its path).
# What it runs (tests/gpu/check.py), printing one JSON line each, then a summary line:
#   setup                 GPU, torch, training dtype (bfloat16) and attention kernel (flash or sdpa)
#   packed_vs_per_sample  log-probs of tree rows (a shared 1.5k prompt, 4 branches) and flat rows against
#                         each sample forwarded alone by plain transformers; max |diff| < 0.05 nats in bf16
#   bf16_step             one optimizer step in bf16 (LoRA in float32) moves the adapter, ratios ~1
#   park_optimizer        an idle policy's AdamW moments parked in pinned host memory free their GPU memory,
#                         and the step after they come back equals one whose moments stayed (learner/parking.py)
#   peak_memory           peak CUDA memory and time of one step on one sample of 8k and 32k tokens
#   memory_linear         32k peak <= 1.125 x 4 x the 8k peak
# Then (tests/gpu/fsdp_check.py; FSDP_CHECK=0 leaves it out) the base sharded by FSDP2 over every GPU
# (at most 8), in float32:
#   fsdp_step             2 steps sharded equal data parallelism on as many GPUs (1e-6) and one GPU alone
#                         (1e-4); with one GPU, FSDP2 over one rank against the whole base
# Then (tests/gpu/pi_round.py, needs pi 0.73.1 and bubblewrap: `sudo tests/setup_machine.sh demo`; and
# vLLM with CUDA in the same Python; PI_ROUND=0 leaves it out) a short GRPO round with pi on MODEL_DIR:
#   quickstart            `harnessrl quickstart --harness pi` finished within 8 minutes (wall_s)
#   demonstrations        the solutions teacher's rollouts, each later turn extending the previous exactly
#   grpo                  at least one learner step on pi's own rollouts, published and hot-swapped
#   held_out              held-out pass@1 of the base model and of the last version
# Exit status 0 when every check passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL_DIR="${1:-tests/gpu/model}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
if [ ! -f "$MODEL_DIR/config.json" ]; then
  echo "no Hugging Face model at $MODEL_DIR: carry one (e.g. SmolLM2-135M from \`harnessrl models prepare\`)" >&2
  exit 2
fi
"$PYTHON" - <<'PY' || { echo "the Python at $PYTHON lacks the GPU install (see the top of this script)" >&2; exit 2; }
import torch, transformers, peft  # noqa: F401
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, peft {peft.__version__}")
PY
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
status=0
"$PYTHON" tests/gpu/check.py "$MODEL_DIR" --lengths "${LENGTHS:-8192,32768}" || status=1
if [ "${FSDP_CHECK:-1}" != 0 ]; then
  "$PYTHON" tests/gpu/fsdp_check.py "$MODEL_DIR" || status=1
fi
if [ "${PI_ROUND:-1}" != 0 ]; then
  if ! command -v pi >/dev/null || ! command -v bwrap >/dev/null; then
    echo '{"check": "pi_round", "ok": false, "why": "pi or bubblewrap missing: sudo tests/setup_machine.sh demo"}'
    status=1
  else
    "$PYTHON" tests/gpu/pi_round.py "$MODEL_DIR" --timeout-s "${PI_ROUND_TIMEOUT_S:-480}" || status=1
  fi
fi
exit $status
