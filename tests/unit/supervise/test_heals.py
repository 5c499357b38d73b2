"""Which problems a parked pod can wait out (launcher/parking.py `heals_in_place`): what can change
under a running container heals in place; what the container was started with only by a rollout."""

from __future__ import annotations

import pytest

from launcher.contract.errors import Problem
from launcher.parking import heals_in_place

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
