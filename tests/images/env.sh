# Sourced by tests/images/{build,clean}.sh and tests/test.sh's images tier: where the tier keeps its
# cache and work files, podman's configuration, and the images' names.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
# The base tarball, wheels and .debs, kept across runs like the engine venvs.
export LLMD_IMAGES_CACHE=${LLMD_IMAGES_CACHE:-$(dirname "$LLMD_VENVS")/images}
export LLMD_IMAGES_WORK=$LLMD_IMAGES_CACHE/run  # this run's files (containers.conf, pip.conf, times)
export LLMD_IMAGE_PREFIX=localhost/llm-d-launcher-test
IMAGE_PREFIX=$LLMD_IMAGE_PREFIX
mkdir -p "$LLMD_IMAGES_WORK"
# podman on this kind of machine (a container without CAP_SYS_RESOURCE, cgroups in hybrid mode): crun
# refuses the hybrid layout, so runc; podman's default rlimits (nofile 1048576) are refused, so ones
# under the hard limits; no network namespace unless a run asks (--network=none everywhere, and never
# podman's default bridge cni-podman0). The machine's own containers.conf is left alone.
cat >"$LLMD_IMAGES_WORK/containers.conf" <<'CONF'
[containers]
netns = "none"
default_ulimits = ["nofile=20000:20000", "nproc=8192:8192"]

[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF=$LLMD_IMAGES_WORK/containers.conf
