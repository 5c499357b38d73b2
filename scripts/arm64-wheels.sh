#!/usr/bin/env bash
# Shows the launcher installs on arm64 (GB200/GB300 Grace nodes) without emulation: pip resolves and
# downloads, for manylinux2014_aarch64 and binary wheels only (nothing to compile), the launcher's
# dependencies (pyproject.toml) and every extra images/targets.txt adds, for the Pythons of the bases
# (3.12: vllm/vllm-openai, lmsysorg/sglang; 3.11: python:3.11-slim, the Mooncake image). The launcher
# itself is pure Python (py3-none-any). Prints one line per Python; exits non-zero when one fails.
# Usage: scripts/arm64-wheels.sh [DOWNLOAD_DIR]     (default: a temporary folder, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d)}
[ $# -ge 1 ] || trap 'rm -rf "$dir"' EXIT
PIP=${PIP:-.venv/bin/pip}
mapfile -t deps < <(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
mapfile -t extras < <(grep -o 'PIP_EXTRAS[A-Z_]*=[^ ]*' images/targets.txt images/engine.Dockerfile |
  cut -d= -f2- | tr ', ' '\n\n' | grep . | sort -u)
extras+=("mooncake-transfer-engine-non-cuda==$(sed -n 's/^ARG MOONCAKE_VERSION=//p' images/mooncake.Dockerfile)")
download() {  # download PYTHON WHAT PLATFORM... -- REQUIREMENTS...
  local python=$1 what=$2 platforms=()
  shift 2
  while [ "$1" != -- ]; do platforms+=(--platform "$1"); shift; done
  shift
  "$PIP" download -q -d "$dir/$python-$what" "${platforms[@]}" --only-binary=:all: --python-version "$python" "$@" \
    2> >(grep -v 'is ignored: it is neither' >&2)
  echo "python $python aarch64, $what: $(find "$dir/$python-$what" -name '*.whl' | wc -l) wheels, none to build"
}
for python in 3.12 3.11; do
  # The launcher's own set: manylinux2014 (glibc 2.17), so any arm64 base takes it.
  download "$python" launcher manylinux2014_aarch64 -- "${deps[@]}"
  # The images' extras: fastsafetensors 0.5.0's aarch64 wheel is manylinux_2_28 (glibc 2.28); the
  # engine bases are Ubuntu 22.04 or newer (glibc 2.35), Debian bookworm's 2.36. Without their
  # dependencies (torch, numpy), which the engine bases ship.
  download "$python" extras manylinux2014_aarch64 manylinux_2_28_aarch64 -- --no-deps "${extras[@]}"
done
