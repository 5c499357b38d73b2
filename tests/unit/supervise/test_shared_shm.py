"""/dev/shm shared across the pods of an SGLang group that do not share the network is refused in
preflight: each pod leaves a flock-held marker naming its LWS group, worker index and POD_IP in its
shm directory (a tmp directory here); a live marker of the same group with another POD_IP means the
directory is shared across network namespaces, the case SGLang 0.5.23 hangs in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.plan import Plan
from launcher.supervise import preflight
from launcher.supervise.host.shared_shm import MARKER_PREFIX
from launcher.supervise.preflight import check_shm_private
from roles import build_plan

KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))
LEADER = "kimi-k3-1-tpu-sglang-decode-0.kimi-k3-1-tpu-sglang-decode.llm-d-kimi-k3-1"


def _plan(index: int, pool: str = "tpu", leader: str = LEADER, size: int = 4) -> Plan:
    settings = Settings(
        leader_address=leader, group_size=size, worker_index=index, pod_ip=f"10.0.0.{index + 1}", pool=pool
    )
    return build_plan(settings, KIMI)


@pytest.fixture(autouse=True)
def release_markers() -> Iterator[None]:
    """Each check keeps its marker's lock (the pod lives); a test's pods end with it."""
    yield
    while preflight.HELD_SHM_MARKERS:
        os.close(preflight.HELD_SHM_MARKERS.popitem()[1])


def _pod_ends(directory: Path, index: int) -> None:
    os.close(preflight.HELD_SHM_MARKERS.pop((str(directory), LEADER, index)))


def test_a_group_member_on_another_network_sharing_the_directory_is_refused(tmp_path: Path) -> None:
    assert _plan(0).needs.private_shm is not None
    assert check_shm_private(_plan(0), str(tmp_path), "10.0.0.1") == []
    (problem,) = check_shm_private(_plan(1), str(tmp_path), "10.0.0.2")
    assert problem.setting == "/dev/shm"
    assert f"{tmp_path} is shared with worker 0 (10.0.0.1) of this LWS group" in problem.message
    assert "hang forever in TP init" in problem.message
    assert "hostNetwork: true" in problem.fix and "emptyDir with medium: Memory" in problem.fix


def test_members_sharing_the_network_too_or_of_another_group_are_not(tmp_path: Path) -> None:
    assert check_shm_private(_plan(0), str(tmp_path), "10.0.0.1") == []
    assert check_shm_private(_plan(1), str(tmp_path), "10.0.0.1") == []  # hostNetwork + hostIPC
    other_group = _plan(1, leader=LEADER.replace("decode-0.", "decode-1."))
    assert check_shm_private(other_group, str(tmp_path), "10.0.0.9") == []


def test_a_marker_left_by_a_launcher_that_ended_is_stale_and_removed(tmp_path: Path) -> None:
    assert check_shm_private(_plan(0), str(tmp_path), "10.0.0.1") == []
    _pod_ends(tmp_path, 0)  # its lock is released with it (the file stays, as after a SIGKILL)
    assert len(list(tmp_path.glob(MARKER_PREFIX + "*"))) == 1
    assert check_shm_private(_plan(1), str(tmp_path), "10.0.0.2") == []
    assert [p.name.rsplit("-", 1)[1] for p in tmp_path.glob(MARKER_PREFIX + "*")] == ["1"]


def test_a_live_marker_of_another_process_is_seen(tmp_path: Path) -> None:
    """The lock is the other launcher's, in another process, as in two pods."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from launcher.supervise.host.shared_shm import claim_membership\n"
         f"claim_membership({str(tmp_path)!r}, {LEADER!r}, 0, '10.0.0.1'); print('held', flush=True)\n"
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3],
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        (problem,) = check_shm_private(_plan(1), str(tmp_path), "10.0.0.2")
        assert "worker 0 (10.0.0.1)" in problem.message
    finally:
        holder.communicate("", timeout=10)
    _pod_ends(tmp_path, 1)
    assert check_shm_private(_plan(2), str(tmp_path), "10.0.0.3") == []  # the holder ended


def test_an_engine_without_the_trap_leaves_no_marker(tmp_path: Path) -> None:
    vllm = _plan(1, pool="prefill", leader="prefill-0.prefill.ns", size=2)
    assert vllm.needs.private_shm is None
    assert check_shm_private(vllm, str(tmp_path), "10.0.0.2") == []
    assert list(tmp_path.iterdir()) == []


def test_a_parked_pod_checking_again_holds_one_marker(tmp_path: Path) -> None:
    """Preflight runs again while a pod is parked: its marker is replaced, its old lock let go."""
    open_before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        assert check_shm_private(_plan(0), str(tmp_path), "10.0.0.1") == []
    assert len(os.listdir("/proc/self/fd")) == open_before + 1  # one lock held, none leaked
    assert len(list(tmp_path.iterdir())) == 1
    (problem,) = check_shm_private(_plan(1), str(tmp_path), "10.0.0.2")  # still seen live
    assert "worker 0 (10.0.0.1)" in problem.message


def test_plan_group_says_what_it_cannot_see(run_cli: Any) -> None:
    """`plan --group` reads env, not the pod spec (hostIPC, a hostPath /dev/shm): each SGLang pod's
    plan says the refusal is preflight's, a vLLM group's says nothing of it."""
    env = {"LWS_LEADER_ADDRESS": LEADER, "LWS_GROUP_SIZE": "4", "LWS_WORKER_INDEX": "0", "LLMD_POOL": "tpu"}
    code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
    assert code == 0, err
    pods = json.loads(out)["pods"]
    assert len(pods) == 4
    for pod in pods:
        (note,) = [n for n in pod["notes"] if "/dev/shm must not be shared" in n]
        assert "preflight refuses it" in note and "`plan --group` cannot see the pod spec" in note
    env = {
        "LWS_LEADER_ADDRESS": "p-0.p.ns",
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "0",
        "LLMD_POOL": "prefill",
    }
    code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
    assert code == 0, err
    assert not [n for pod in json.loads(out)["pods"] for n in pod["notes"] if "/dev/shm must not" in n]
