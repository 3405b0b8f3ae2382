#!/usr/bin/env bash
# EAGLE on a CUDA GPU, where one is available: train (or reuse) an EAGLE head for the embedded
# SmolLM2-135M, then benchmark eagle chain and tree, samd and pld against dense decoding in bfloat16
# and float32 on held-out built-in prompts, each output checked against the dense output of its dtype.
#   bash scripts/gpu_check_eagle.sh                 # HEAD=dir to reuse a trained head
# Nothing else in specsparse needs a GPU; on CPU use the same commands with --device cpu.
set -euo pipefail
HEAD="${HEAD:-${SPECSPARSE_CACHE:-$HOME/.cache/specsparse}/eagle/smollm2-135m-cuda}"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this check needs a GPU')"
if [ ! -f "$HEAD/config.json" ]; then
  python -m specsparse.cli train-drafter --output "$HEAD" --device cuda --max-new-tokens 256 --epochs 10
fi
python scripts/bench_eagle.py --head "$HEAD" --device cuda --dtypes bfloat16,float32 --per-domain 4 --max-new-tokens 128
