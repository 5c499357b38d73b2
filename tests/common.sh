# Sourced by tests/install.sh, tests/check.sh and tests/test.sh: the repository root as the working
# directory, the engine venvs' location (shared by every checkout on the machine: about 15 GB, each
# rebuilt only when its pinned recipe in scripts/install-engines.sh changes; LLMD_VENVS overrides),
# and a timed step banner.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LLMD_VENVS=${LLMD_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-d-launcher/venvs}
export LLMD_TESTS_STARTED=${LLMD_TESTS_STARTED:-$(date +%s)}  # tests/run.sh: one clock for all steps
step() { printf '\n=== %s (%ss)\n' "$*" "$(($(date +%s) - LLMD_TESTS_STARTED))"; }
# Each part's wall time ("NAME SECONDS RC" lines), for the table the outermost script prints at its end.
times_file() {  # tests/run.sh or tests/test.sh, whichever runs first, owns the file and prints it
  [ -n "${LLMD_TESTS_TIMES:-}" ] && return
  export LLMD_TESTS_TIMES
  LLMD_TESTS_TIMES=$(mktemp -t llmd-test-times.XXXX)
  trap times_summary EXIT
}
timed() {  # timed NAME COMMAND...: runs it (set -e inside) and records its wall time and exit code.
  # Never call it after && or || (or in an if): bash then ignores set -e inside it.
  local name=$1 start=$SECONDS rc errexit=$-
  shift
  set +e
  (set -e; "$@")
  rc=$?
  [[ $errexit != *e* ]] || set -e
  echo "$name $((SECONDS - start)) $rc" >>"$LLMD_TESTS_TIMES"
  return "$rc"
}
times_summary() {
  local rc=$? total=$(($(date +%s) - LLMD_TESTS_STARTED))
  printf '\n=== time per part (wall clock; * ran beside another part)\n'
  awk '{ printf "%-18s %3d:%02d  %s\n", $1, $2 / 60, $2 % 60, ($3 == 0 ? "passed" : "FAILED, exit " $3) }' \
    "$LLMD_TESTS_TIMES"
  printf '%-18s %3d:%02d\n' total $((total / 60)) $((total % 60))
  rm -f "$LLMD_TESTS_TIMES"
  return "$rc"
}
beside() {  # beside LIGHT HEAVY (two functions): LIGHT in the background, its output held until both end
  local light=$1 heavy=$2 held pid rc light_rc
  held=$(mktemp)
  timed "$light*" "$light" >"$held" 2>&1 &
  pid=$!
  set +e
  timed "$heavy" "$heavy"
  rc=$?
  wait "$pid"
  light_rc=$?
  set -e
  cat "$held"
  rm -f "$held"
  return $((rc ? rc : light_rc))
}

need_venv() {
  [ -x .venv/bin/python ] || { echo "no project venv (.venv): run tests/install.sh first" >&2; exit 2; }
}
