#!/usr/bin/env bash
# The images tier (tests/test.sh images): build every Dockerfile in images/ (tests/images/build.sh),
# run the checks in them (tests/images/test_*.py), and remove what is not cached (tests/images/clean.sh),
# whatever happened.
source "$(dirname "$0")/env.sh"
trap 'bash tests/images/clean.sh' EXIT
bash tests/images/build.sh
.venv/bin/python -m pytest -q -p no:cacheprovider -rA tests/images -m images  # -rA: the measured times, printed
