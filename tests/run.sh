#!/usr/bin/env bash
# The test command (README, .ci/run): everything from a fresh machine, the sum of three steps that
# also run alone: tests/install.sh (venvs, apt), tests/check.sh (lint, types, import contracts,
# images, docs) and tests/test.sh (every tier). Any failure, pytest's exit 5 for "collected nothing"
# included, fails the run.
set -euo pipefail
here=$(dirname "$0")
export LLMD_TESTS_STARTED=$(date +%s)
bash "$here/install.sh"
bash "$here/check.sh"
bash "$here/test.sh"
