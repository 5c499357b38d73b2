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
timed install bash tests/install.sh
timed check bash tests/check.sh
bash tests/test.sh
