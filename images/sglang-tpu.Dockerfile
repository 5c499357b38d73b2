# syntax=docker/dockerfile:1
#
# llm-d-launcher on SGLang (TPU): the image of the kimi-k3.1-pro `tpu` pods (tpu7x 2x2x4 slices).
# PID 1 is `llm-d-launcher run`; it execs `python3 -m sglang.launch_server` from this image.
#
# Build from the repo root (the build context must contain pyproject.toml, README.md, launcher/,
# roles/ and healthchecks/). TPU VM hosts are amd64:
#   docker buildx build --platform linux/amd64 -f images/sglang-tpu.Dockerfile -t <registry>/llm-d-launcher-sglang-tpu:<version> .
#
# DIGESTS: every `sha256:000...0` below is a placeholder. Release engineering replaces each with the
# digest of the named tag (`docker buildx imagetools inspect <image>:<tag>`) before building;
# a build with the placeholders fails when it pulls the base, on purpose. Override without editing
# with --build-arg SGLANG_TPU_BASE=... / PYTHON_BUILDER=...

# Only builds the launcher's pure-Python wheel; nothing from this stage ships but the .whl.
ARG PYTHON_BUILDER=docker.io/library/python:3.11-slim-bookworm@sha256:0000000000000000000000000000000000000000000000000000000000000000
# UNVERIFIED IMAGE: the Kimi-K3.1-Pro guide names "SGLang on Torch TPU
# (docker.io/lmsysorg/sglang:dev-kimi-k31-pro-tpu, pinned by digest)". Its existence, its Python
# and its default user have not been checked; this file assumes python3 with pip on PATH, running
# as root, with `sglang.launch_server` importable.
ARG SGLANG_TPU_BASE=docker.io/lmsysorg/sglang:dev-kimi-k31-pro-tpu@sha256:0000000000000000000000000000000000000000000000000000000000000000

FROM ${PYTHON_BUILDER} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY launcher ./launcher
COPY roles ./roles
COPY healthchecks ./healthchecks
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${SGLANG_TPU_BASE}
ARG SGLANG_TPU_BASE
ARG IMAGE_SOURCE=unset
ARG IMAGE_REVISION=unset
LABEL org.opencontainers.image.title="llm-d-launcher sglang-tpu" \
      org.opencontainers.image.description="llm-d-launcher (ENTRYPOINT) + SGLang for TPU" \
      org.opencontainers.image.source="${IMAGE_SOURCE}" \
      org.opencontainers.image.revision="${IMAGE_REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${SGLANG_TPU_BASE}"

# Install into SGLang's own Python. The constraints file is the base image's installed set, so pip
# may add the launcher's missing dependencies but can never upgrade or downgrade anything SGLang
# ships (torch, torch_xla/jax, pydantic, ...): a real conflict fails the build instead.
# The wheel is bind-mounted from the builder stage, so it leaves no layer behind.
# `catalog build` reads the flags of the SGLang this image really ships into /opt/llm-d-launcher/catalogs,
# where `run` looks first (LLMD_CATALOG_DIR).
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/llm-d-launcher-dist \
    python3 -m pip list --format=freeze > /tmp/base-constraints.txt \
 && PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    python3 -m pip install --no-cache-dir --constraint /tmp/base-constraints.txt /tmp/llm-d-launcher-dist/*.whl \
 && rm -f /tmp/base-constraints.txt \
 && llm-d-launcher recipes > /dev/null \
 && llm-d-launcher catalog build --engine sglang --python "$(command -v python3)" \
 && python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang.launch_server') is None)"

ENV PYTHONUNBUFFERED=1

# The base image's user is kept (TPU device access is granted by the pod spec).
# No HEALTHCHECK: Kubernetes probes.
STOPSIGNAL SIGTERM
ENTRYPOINT ["llm-d-launcher"]
CMD ["run"]
