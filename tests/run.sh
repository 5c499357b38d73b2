#!/usr/bin/env bash
# The test command (README, .ci/run): everything from a fresh machine, the sum of three steps that
# also run alone: tests/install.sh (venvs, apt), tests/check.sh (lint, types, import contracts,
# images, docs) and tests/test.sh (every tier). Any failure, pytest's exit 5 for "collected nothing"
# included, fails the run.
# At the end (pass or fail) a table gives each part's wall time: install, check and every tier.
set -euo pipefail
export LLMD_TESTS_STARTED=$(date +%s)
source "$(dirname "$0")/common.sh"
times_file
install_venv() { bash tests/install.sh venv; }
install_rest() { bash tests/install.sh engines apt; }
check() { bash tests/check.sh; }
timed install_venv install_venv
# The checks (CPU: ruff, mypy, the docs tests) need only the project venv: they run beside the engine
# venvs and the apt packages (mostly downloads on a fresh machine).
beside check install_rest
bash tests/test.sh
