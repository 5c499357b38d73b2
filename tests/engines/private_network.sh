#!/usr/bin/env bash
# Runs a command inside the private network namespace the engine tier uses (called under
# `unshare -rn`, so it is root of a fresh user + network namespace and can set up links).
#
# Why: Mooncake's listeners bind all interfaces whatever host they are given, and its transfer
# engine refuses a loopback-only host (measured with kvcache-ai/Mooncake's mooncake-transfer-engine-non-cuda
# 0.3.13.post1 wheel). Here "all interfaces" are loopback plus a veth pair that exists only inside
# this namespace, so nothing the tests start is reachable from outside the test run.
set -euo pipefail
ip link set lo up
ip link add llmd0 type veth peer name llmd1
ip addr add 10.213.0.1/24 dev llmd0
ip link set llmd0 up
ip link set llmd1 up
exec "$@"
