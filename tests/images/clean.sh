#!/usr/bin/env bash
# Removes what the images tier made and does not cache: its containers, the project's images (":run"),
# the intermediate stages of their builds, and fails if podman's default bridge exists (the tier never
# uses a host network; cni-podman0 would mean something did). Kept: the Debian base and the STAND-IN
# bases of the current recipes ($LLMD_IMAGE_PREFIX/base-*, standin-*:<stamp>), $LLMD_IMAGES_CACHE.
source "$(dirname "$0")/env.sh"
mapfile -t containers < <(podman ps -a --format '{{.Names}}' | grep '^llmd-test-' || true)
[ ${#containers[@]} -eq 0 ] || podman rm -f -t 0 "${containers[@]}" >/dev/null
mapfile -t made < <(podman images --format '{{.Repository}}:{{.Tag}}' | grep "^$IMAGE_PREFIX/.*:run$" || true)
[ ${#made[@]} -eq 0 ] || podman rmi -f "${made[@]}" >/dev/null
# Cached bases of recipes that changed since (each stand-in is 2.7 GB): all but the ones this build used.
if [ -f "$LLMD_IMAGES_WORK/cached" ]; then
  mapfile -t stale < <(podman images --format '{{.Repository}}:{{.Tag}}' |
    grep -E "^$IMAGE_PREFIX/(base-|standin-)" | grep -vxF -f "$LLMD_IMAGES_WORK/cached" || true)
  [ ${#stale[@]} -eq 0 ] || podman rmi -f "${stale[@]}" >/dev/null
  find "$LLMD_IMAGES_CACHE" -maxdepth 1 -name 'base-*.tar' ! -name "$(basename "$(head -1 "$LLMD_IMAGES_WORK/cached" | sed 's/.*://; s/^/base-/; s/$/.tar/')")" -delete
fi
# The builder stages: untagged images that were not there before this run's build (build.sh lists them).
before="$LLMD_IMAGES_WORK/untagged-before"
mapfile -t stages < <(podman images -q --filter dangling=true --no-trunc | grep -vxF -f "$before" 2>/dev/null || true)
[ ! -f "$before" ] || [ ${#stages[@]} -eq 0 ] || podman rmi -f "${stages[@]}" >/dev/null 2>&1 || true
if ip link show cni-podman0 >/dev/null 2>&1; then
  echo "images tier: podman's host bridge cni-podman0 exists; nothing of this tier may create it" >&2
  exit 1
fi
