#!/usr/bin/env bash
# Submit a command (normally a Hydra sweep) as a Ray job; a thin wrapper around `specsparse submit`,
# which runs `ray job submit --address ... --working-dir . --runtime-env-json '{...}' -- COMMAND`.
#
#   RAY_ADDRESS=http://HEAD:8265 scripts/submit_ray_job.sh -- python run.py -m experiment=tss_main runner=ray
#   scripts/submit_ray_job.sh --address http://HEAD:8265 --pip-from-pyproject -- python run.py -m ...
#
# Token auth (on by default in Ray 2.60): export RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) with the
# cluster's token, or keep it in ~/.ray/auth_token.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" -m specsparse.cli submit "$@"
