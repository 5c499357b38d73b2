#!/usr/bin/env bash
# The static checks: lint and format, types, the import contracts, the image linter, and the
# repository's own consistency (docs links and anchors, docs command examples, the layer table).
# Needs tests/install.sh's project venv; runs no engine.
source "$(dirname "$0")/common.sh"
need_venv

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

step "mypy"
.venv/bin/mypy

step "import contracts (import-linter: pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports

step "hadolint (images/)"
bash scripts/lint-images.sh

step "docs and repository (tests/unit/repo: links, anchors, command examples, layers)"
.venv/bin/python -m pytest tests/unit/repo -q -p no:cacheprovider
