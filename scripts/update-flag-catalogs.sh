#!/usr/bin/env bash
# Regenerates roles/catalogs/*.json from the engines' own parsers (the venvs of
# scripts/install-engines.sh). The engine tier fails when a committed catalogue differs.
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS=${LLMD_VENVS:-.venvs}
export HOME=${TMPDIR:-/tmp} VLLM_TARGET_DEVICE=cpu
"$VENVS/vllm/bin/python" scripts/flag_catalogs/vllm_serve.py 2>/dev/null >roles/catalogs/vllm-serve.json
"$VENVS/sglang/bin/python" scripts/flag_catalogs/sglang_server.py 2>/dev/null >roles/catalogs/sglang-server.json
echo "updated: $(ls roles/catalogs/*.json | tr '\n' ' ')"
