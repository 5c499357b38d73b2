"""Which problems a parked pod can wait out (launcher/parking.py `heals_in_place`): what can change
under a running container heals in place; what the container was started with only by a rollout."""

from __future__ import annotations

import io
import math

import pytest

from healthchecks.state import PodHealth
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.plan import Check, Probes
from launcher.contract.redact import Scrubber
from launcher.parking import Parking, heals_in_place
from launcher.supervise.logs import configure

IN_PLACE = [
    "LLMD_RECIPE_FILE",  # the mounted ConfigMap's content
    "pools.prefill.nodez",  # a recipe key: fixed in the file
    "model.path",  # the checkpoint's copy finishes
    "port 8000",  # the holder exits
    "LWS_LEADER_ADDRESS",  # the leader pod gets its DNS record
    "LLMD_PROBE_PORT",
    "--speculative-config model",  # the drafter arrives in the hub cache
]
BY_A_ROLLOUT = [
    "LLMD_STALL_SECONDS",  # the container's env
    "POD_IP",
    "CAP_IPC_LOCK",  # capabilities and rlimits are fixed at the container's start
    "RLIMIT_MEMLOCK",
    "container memory limit",
    "rdma",  # devices are given when the pod is created
    "process engine",  # a binary missing from the image
    "engine interpreter /opt/vllm/bin/python",
    "flag catalogue",
    "/proc",  # the pod's PID namespace
]


@pytest.mark.parametrize("setting", IN_PLACE)
def test_what_can_change_under_a_running_container_heals_in_place(setting: str) -> None:
    assert heals_in_place(Problem(setting, "is wrong", "fix it"))


@pytest.mark.parametrize("setting", BY_A_ROLLOUT)
def test_what_the_container_started_with_heals_only_by_a_rollout(setting: str) -> None:
    assert not heals_in_place(Problem(setting, "is wrong", "fix it"))


def test_a_parked_pods_reason_keeps_each_fix_in_sight() -> None:
    """The reason the probes, the log and the termination message show: a 100 KB value echoed is cut
    in its middle (after the secrets are hidden), and the fix after it, and the next problem, stay."""
    secret = "hf_ParkedSecret0123456789"
    health = PodHealth(Probes(8090, ready=(Check("engine", "engine"),), started=Check("engine", "engine")))
    scrub = Scrubber([secret])
    parking = Parking(health, configure(True, scrub, io.StringIO()), math.inf, scrub=scrub)
    big = Problem("LLMD_EXTRA_ARGS", f"starts with '{'a' * 280}{secret}{'b' * 100_000}'", "give flags")
    parking.park(ConfigError([big, Problem("POD_IP", "is not set", "give it from the downward API")]))
    assert health.parked is not None
    reason = health.parked.reason
    assert len(reason) < 1000 and "give flags; POD_IP: is not set" in reason, reason[:300]
    assert not any(secret[i : i + 6] in reason for i in range(len(secret) - 5)), reason
