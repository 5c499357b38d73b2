# syntax=docker/dockerfile:1
#
# llm-d-launcher on vLLM (GPU): the image of the kimi-k3.1-pro `prefill` and `decode` pods.
# PID 1 is `llm-d-launcher run`; it execs vLLM and, on decode pods, llm-d-router-disagg-sidecar.
#
# Build from the repo root (the build context must contain pyproject.toml, README.md, launcher/,
# roles/ and healthchecks/). GB300 nodes are Grace (arm64):
#   docker buildx build --platform linux/arm64 -f images/vllm-gpu.Dockerfile -t <registry>/llm-d-launcher-vllm-gpu:<version> .
#
# DIGESTS: every `sha256:000...0` below is a placeholder. Release engineering replaces each with the
# digest of the named tag (`docker buildx imagetools inspect <image>:<tag>`) before building;
# a build with the placeholders fails when it pulls the base, on purpose. Override without editing
# with --build-arg VLLM_BASE=... / DISAGG_SIDECAR_IMAGE=... / PYTHON_BUILDER=...

# Only builds the launcher's pure-Python wheel; nothing from this stage ships but the .whl.
ARG PYTHON_BUILDER=docker.io/library/python:3.11-slim-bookworm@sha256:0000000000000000000000000000000000000000000000000000000000000000
# The vLLM build named by the Kimi-K3.1-Pro guide ("vllm/vllm-openai:kimi-k31, pinned by digest").
ARG VLLM_BASE=docker.io/vllm/vllm-openai:kimi-k31@sha256:0000000000000000000000000000000000000000000000000000000000000000
# The P/D sidecar (llm-d/llm-d-router, cmd/pd-sidecar), the image tag current llm-d guides use.
ARG DISAGG_SIDECAR_IMAGE=ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0@sha256:0000000000000000000000000000000000000000000000000000000000000000

FROM ${PYTHON_BUILDER} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY launcher ./launcher
COPY roles ./roles
COPY healthchecks ./healthchecks
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${DISAGG_SIDECAR_IMAGE} AS disagg-sidecar

FROM ${VLLM_BASE}
ARG VLLM_BASE
ARG DISAGG_SIDECAR_IMAGE
ARG IMAGE_SOURCE=unset
ARG IMAGE_REVISION=unset
LABEL org.opencontainers.image.title="llm-d-launcher vllm-gpu" \
      org.opencontainers.image.description="llm-d-launcher (ENTRYPOINT) + vLLM + llm-d-router-disagg-sidecar" \
      org.opencontainers.image.source="${IMAGE_SOURCE}" \
      org.opencontainers.image.revision="${IMAGE_REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${VLLM_BASE}" \
      io.llm-d.disagg-sidecar.image="${DISAGG_SIDECAR_IMAGE}"

# UNVERIFIED PATH: /app/pd-sidecar is where llm-d/llm-d-router's Dockerfile.sidecar puts the binary
# (a static CGO_ENABLED=0 Go build on distroless, so it runs here without extra libraries). It has not
# been checked inside the pinned image; if the image moved it, this COPY fails the build.
COPY --from=disagg-sidecar /app/pd-sidecar /usr/local/bin/llm-d-router-disagg-sidecar

# Install into vLLM's own Python. The constraints file is the base image's installed set, so pip may
# add the launcher's missing dependencies but can never upgrade or downgrade anything vLLM ships
# (torch, pydantic, pyzmq, ...): a real conflict fails the build instead of changing the engine.
# The wheel is bind-mounted from the builder stage, so it leaves no layer behind.
# `catalog build` reads the flags of the vLLM this image really ships (a custom build may differ from
# any release) into /opt/llm-d-launcher/catalogs, where `run` looks first (LLMD_CATALOG_DIR).
# The recipe's flags need three packages the base does not promise (the launcher's preflight refuses
# to start without them, README "Preflight"): --load-format fastsafetensors (vLLM's extra of that
# name), MooncakeStoreConnector (mooncake-transfer-engine) and NixlConnector (nixl). Pinned; if the
# base already ships one at another version, the constraints make the build fail rather than swap it.
# nixl is a meta package: nixl==X needs nixl-cu12==X and nixl-cu13==X, its CUDA backends (vLLM imports
# nixl._api, which loads one). 1.5.1 is the newest release with both on PyPI (nixl 1.5.2 names a
# nixl-cu12==1.5.2 that PyPI never had, for x86_64 or arm64: that build could not succeed). The check
# after the install names any module missing, so a base or index without them fails here, not at run time.
ARG FASTSAFETENSORS_VERSION=0.5.0
ARG MOONCAKE_VERSION=0.3.13.post1
ARG NIXL_VERSION=1.5.1
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/llm-d-launcher-dist \
    python3 -m pip list --format=freeze > /tmp/base-constraints.txt \
 && PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    python3 -m pip install --no-cache-dir --constraint /tmp/base-constraints.txt /tmp/llm-d-launcher-dist/*.whl \
      "fastsafetensors==${FASTSAFETENSORS_VERSION}" "mooncake-transfer-engine==${MOONCAKE_VERSION}" \
      "nixl==${NIXL_VERSION}" \
 && python3 -c "import importlib.util as u, sys; missing = [m for m in ('fastsafetensors', 'mooncake', 'nixl') if not u.find_spec(m)] + ([] if u.find_spec('nixl_cu12') or u.find_spec('nixl_cu13') else ['nixl_cu12 or nixl_cu13 (NIXL CUDA backend)']); sys.exit('missing after the install: ' + ', '.join(missing) if missing else None)" \
 && rm -f /tmp/base-constraints.txt \
 && llm-d-launcher recipes > /dev/null \
 && llm-d-launcher catalog build --engine vllm --python "$(command -v python3)" \
 && test -x /usr/local/bin/llm-d-router-disagg-sidecar

ENV PYTHONUNBUFFERED=1

# The base image's user (root in vllm/vllm-openai) is kept: RDMA/NIXL and GPUDirect need what the
# pod's securityContext grants, which is the manifest's decision. No HEALTHCHECK: Kubernetes probes.
STOPSIGNAL SIGTERM
ENTRYPOINT ["llm-d-launcher"]
CMD ["run"]
