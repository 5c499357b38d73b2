#!/usr/bin/env bash
# Builds (and with --push, pushes) the launcher's images, one per row of images/targets.txt, with BuildKit:
#   docker buildx build --platform <row's> -f images/<row's>.Dockerfile --build-arg <row's> -t <registry>/llm-d-launcher-<name>:<version> .
# Usage: scripts/build-images.sh REGISTRY VERSION [--push] [NAME...]      (default: every row)
#        scripts/build-images.sh --print ...   prints the commands instead of running them
# Env:   IMAGE_SOURCE, IMAGE_REVISION fill the OCI labels (default: unset).
set -euo pipefail
cd "$(dirname "$0")/.."

run=()
[ "${1:-}" = --print ] && { run=(echo); shift; }
[ $# -ge 2 ] || { echo "usage: $0 [--print] REGISTRY VERSION [--push] [NAME...]" >&2; exit 2; }
registry=$1 version=$2
shift 2
output=()
[ "${1:-}" = --push ] && { output=(--push); shift; }
wanted=" $* "

while read -r name platforms dockerfile args; do
  case $name in '' | '#'*) continue ;; esac
  [ "$wanted" = "  " ] || [[ $wanted == *" $name "* ]] || continue
  build_args=(--build-arg "IMAGE_NAME=$name" --build-arg "IMAGE_SOURCE=${IMAGE_SOURCE:-unset}"
    --build-arg "IMAGE_REVISION=${IMAGE_REVISION:-unset}")
  for arg in $args; do build_args+=(--build-arg "${arg//,/ }"); done
  "${run[@]}" docker buildx build --platform "$platforms" -f "images/$dockerfile.Dockerfile" "${build_args[@]}" \
    "${output[@]}" -t "$registry/llm-d-launcher-$name:$version" .
done <images/targets.txt
