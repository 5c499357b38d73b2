# syntax=docker/dockerfile:1
#
# llm-d-launcher on an engine image (vLLM or SGLang): one Dockerfile for every engine base the guides
# use, each a row of images/targets.txt (its base, engine, sidecar and what it adds); build them with
# scripts/build-images.sh. PID 1 is `llm-d-launcher run`; it execs the engine of the base and, on P/D
# decode pods, llm-d-router-disagg-sidecar. Which pod it becomes is the manifest's (LLMD_RECIPE /
# LLMD_POOL), never the image's.
#
# Build from the repo root (the build context must contain pyproject.toml, README.md, launcher/,
# roles/ and healthchecks/). The defaults below are the vllm-gpu row.
#
# DIGESTS: every `sha256:000...0` is a placeholder. Release engineering replaces each with the digest
# of the named tag (`docker buildx imagetools inspect <image>:<tag>`) in images/targets.txt; a build
# with a placeholder fails when it pulls the base, on purpose.

# Only builds the launcher's pure-Python wheel; nothing from this stage ships but the .whl.
ARG PYTHON_BUILDER=docker.io/library/python:3.11-slim-bookworm@sha256:0000000000000000000000000000000000000000000000000000000000000000
ARG ENGINE_BASE=docker.io/vllm/vllm-openai:v0.27.1@sha256:0000000000000000000000000000000000000000000000000000000000000000
# The P/D sidecar (llm-d/llm-d-router, cmd/pd-sidecar), the image tag current llm-d guides use;
# DISAGG_SIDECAR=with copies its binary in, `without` (no P/D decode pod on this base) does not.
ARG DISAGG_SIDECAR_IMAGE=ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0@sha256:0000000000000000000000000000000000000000000000000000000000000000
ARG DISAGG_SIDECAR=with

FROM ${PYTHON_BUILDER} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY launcher ./launcher
COPY roles ./roles
COPY healthchecks ./healthchecks
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${DISAGG_SIDECAR_IMAGE} AS disagg-sidecar-image

# UNVERIFIED PATH: /app/pd-sidecar is where llm-d/llm-d-router's Dockerfile.sidecar puts the binary
# (a static CGO_ENABLED=0 Go build on distroless, so it runs on any base). Not checked inside the
# pinned tag; if it moved, this COPY fails the build.
FROM ${PYTHON_BUILDER} AS sidecar-with
COPY --from=disagg-sidecar-image /app/pd-sidecar /out/llm-d-router-disagg-sidecar

FROM ${PYTHON_BUILDER} AS sidecar-without
RUN mkdir /out

# BuildKit builds only the stage this names (and what it needs). A stage, not an image: no tag.
# hadolint ignore=DL3006
FROM sidecar-${DISAGG_SIDECAR} AS sidecar

FROM ${ENGINE_BASE}
ARG ENGINE_BASE
ARG DISAGG_SIDECAR_IMAGE
ARG IMAGE_SOURCE=unset
ARG IMAGE_REVISION=unset
# images/targets.txt's name of this row (llm-d-launcher-<name>): the image's title.
ARG IMAGE_NAME=vllm-gpu
# `llm-d-launcher catalog build --engine`: vllm or sglang, the engine the base ships.
ARG ENGINE=vllm
# What the guides' recipes need that this base may lack (the launcher's preflight refuses to start
# without it), each installed only when the base has no distribution of that
# name (one it ships is kept as it is): space-separated pins. PIP_EXTRAS_NO_DEPS without dependencies: the `nixl` meta
# package requires both nixl-cu12 and nixl-cu13, and one CUDA flavour, the base's, is enough (its
# nixl/__init__.py loads the backend of the CUDA major it detects).
ARG PIP_EXTRAS=nixl-cu13==1.5.1
ARG PIP_EXTRAS_NO_DEPS=nixl==1.5.1
LABEL org.opencontainers.image.title="llm-d-launcher ${IMAGE_NAME}" \
      org.opencontainers.image.description="llm-d-launcher (ENTRYPOINT) on ${ENGINE_BASE}" \
      org.opencontainers.image.source="${IMAGE_SOURCE}" \
      org.opencontainers.image.revision="${IMAGE_REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${ENGINE_BASE}" \
      io.llm-d.disagg-sidecar.image="${DISAGG_SIDECAR_IMAGE}"

COPY --from=sidecar /out/ /usr/local/bin/

# Install into the engine's own Python. The constraints file is the base image's installed set, so pip
# may add the launcher's missing dependencies but can never upgrade or downgrade anything the engine
# ships (torch, pydantic, pyzmq, ...): a real conflict fails the build instead of changing the engine.
# The wheel is bind-mounted from the builder stage, so it leaves no layer behind.
# `catalog build` reads the flags of the engine this image really ships (a custom build may differ from
# any release) into /opt/llm-d-launcher/catalogs, where `run` looks first (LLMD_CATALOG_DIR).
# The extras are pinned in their ARGs (hadolint cannot see through them) and split into words on purpose.
# hadolint ignore=DL3013,SC2086
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/llm-d-launcher-dist \
    python3 -m pip list --format=freeze > /tmp/base-constraints.txt \
 && lacking() { for pin in $1; do python3 -m pip show -q "${pin%%[=<>]*}" > /dev/null 2>&1 || echo "$pin"; done; } \
 && extras=$(lacking "${PIP_EXTRAS}") \
 && extras_no_deps=$(lacking "${PIP_EXTRAS_NO_DEPS}") \
 && export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
 && python3 -m pip install --no-cache-dir --constraint /tmp/base-constraints.txt /tmp/llm-d-launcher-dist/*.whl ${extras} \
 && { [ -z "${extras_no_deps}" ] || python3 -m pip install --no-cache-dir --no-deps ${extras_no_deps}; } \
 && rm -f /tmp/base-constraints.txt \
 && llm-d-launcher recipes > /dev/null \
 && llm-d-launcher catalog build --engine "${ENGINE}" --python "$(command -v python3)"

ENV PYTHONUNBUFFERED=1

# The base image's user (root in vllm/vllm-openai and lmsysorg/sglang) is kept: RDMA/NIXL, GPUDirect
# and TPU devices need what the pod's securityContext grants, which is the manifest's decision.
# No HEALTHCHECK: Kubernetes probes.
STOPSIGNAL SIGTERM
ENTRYPOINT ["llm-d-launcher"]
CMD ["run"]
