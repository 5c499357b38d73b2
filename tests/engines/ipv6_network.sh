#!/usr/bin/env bash
# An IPv6-only pod network for tests/engines/test_ipv6_kv_events.py (called under `unshare -rn`):
# the pod IP fd00::7 on a namespace-only veth, ::1 on loopback, no IPv4 address but loopback's.
set -euo pipefail
ip link set lo up
ip link add llmd6a type veth peer name llmd6b
ip link set llmd6a up
ip link set llmd6b up
ip -6 addr add fd00::7/64 dev llmd6a nodad
exec "$@"
