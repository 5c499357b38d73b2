# syntax=docker/dockerfile:1
#
# llm-d-launcher + Mooncake store: the image of the kimi-k3.1-pro `mooncake-master` pod and the
# `mooncake-donor` DaemonSet. PID 1 is `llm-d-launcher run`; it execs mooncake_master or
# mooncake_client. Which one is chosen by the manifest (LLMD_RECIPE / LLMD_POOL), not by the image.
#
# Build from the repo root (the build context must contain pyproject.toml, README.md, launcher/,
# roles/ and healthchecks/). The Mooncake wheel exists for amd64 and arm64:
#   docker buildx build --platform linux/amd64,linux/arm64 -f images/mooncake.Dockerfile -t <registry>/llm-d-launcher-mooncake:<version> .
#
# DIGESTS: the `sha256:000...0` below is a placeholder. Release engineering replaces it with the
# digest of the named tag (`docker buildx imagetools inspect <image>:<tag>`) before building;
# a build with the placeholder fails when it pulls the base, on purpose.

ARG PYTHON_BASE=docker.io/library/python:3.11-slim-bookworm@sha256:0000000000000000000000000000000000000000000000000000000000000000

FROM ${PYTHON_BASE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY launcher ./launcher
COPY roles ./roles
COPY healthchecks ./healthchecks
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_BASE}
ARG PYTHON_BASE
ARG IMAGE_SOURCE=unset
ARG IMAGE_REVISION=unset
# The non-CUDA build of Mooncake: the master and the DRAM donors never touch a GPU, and the CUDA
# wheel (mooncake-transfer-engine) would need CUDA libraries this image does not have. Same
# version, same console scripts (mooncake_master, mooncake_client).
ARG MOONCAKE_VERSION=0.3.13.post1
LABEL org.opencontainers.image.title="llm-d-launcher mooncake" \
      org.opencontainers.image.description="llm-d-launcher (ENTRYPOINT) + Mooncake master and DRAM donor (non-CUDA)" \
      org.opencontainers.image.source="${IMAGE_SOURCE}" \
      org.opencontainers.image.revision="${IMAGE_REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_BASE}"

# Shared libraries the bundled mooncake_master / mooncake_client binaries link (readelf NEEDED) that
# python:3.11-slim lacks: libibverbs.so.1 (needed even for TCP; without it they exit 127),
# libcurl.so.4 and libnuma.so.1. ibverbs-providers holds the RDMA NIC drivers (mlx5, ...) that
# protocol=rdma needs to see any device. Versions are left to the pinned base's Debian release:
# exact Debian revisions change with every point release and would break rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libibverbs1 ibverbs-providers libcurl4 libnuma1 \
 && rm -rf /var/lib/apt/lists/*

# The wheel is bind-mounted from the builder stage, so it leaves no layer behind.
RUN --mount=type=bind,from=wheel,source=/dist,target=/tmp/llm-d-launcher-dist \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    python -m pip install --no-cache-dir \
      "mooncake-transfer-engine-non-cuda==${MOONCAKE_VERSION}" /tmp/llm-d-launcher-dist/*.whl \
 && llm-d-launcher recipes > /dev/null \
 && mooncake_master --version \
 && mooncake_client --version

# Fixed numeric IDs so the pod's runAsNonRoot can verify them. The launcher writes its per-pod
# files under /tmp/llm-d-launcher (LLMD_RUNTIME_DIR), which this user can create. The master runs
# as this user; a donor registering its segment for RDMA needs CAP_IPC_LOCK in force, which
# Kubernetes grants a non-root container only in its bounding set (kubernetes/kubernetes#56374), so
# the donor manifest runs this image as root (deploy/components/mooncake-donors/mooncake-donor.yaml).
# No file capabilities instead: `setcap cap_ipc_lock+ep` on mooncake_client would make it fail to
# exec (EPERM) in any container without IPC_LOCK in its bounding set, and the launcher's memlock
# preflight could not see them.
RUN groupadd --system --gid 10001 llmd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/llmd --create-home --shell /usr/sbin/nologin llmd
USER 10001:10001
WORKDIR /home/llmd

ENV PYTHONUNBUFFERED=1

# No HEALTHCHECK: Kubernetes probes.
STOPSIGNAL SIGTERM
ENTRYPOINT ["llm-d-launcher"]
CMD ["run"]
