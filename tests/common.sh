# Sourced by tests/install.sh, tests/check.sh and tests/test.sh: the repository root as the working
# directory, the engine venvs' location (shared by every checkout on the machine: about 15 GB, each
# rebuilt only when its pinned recipe in scripts/install-engines.sh changes; LLMD_VENVS overrides),
# and a timed step banner.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LLMD_VENVS=${LLMD_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-d-launcher/venvs}
export LLMD_TESTS_STARTED=${LLMD_TESTS_STARTED:-$(date +%s)}  # tests/run.sh: one clock for all steps
step() { printf '\n=== %s (%ss)\n' "$*" "$(($(date +%s) - LLMD_TESTS_STARTED))"; }
need_venv() {
  [ -x .venv/bin/python ] || { echo "no project venv (.venv): run tests/install.sh first" >&2; exit 2; }
}
