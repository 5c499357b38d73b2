"""Host preflight against the real kernel: network namespaces with nine veths, a real memory cgroup,
prlimit and setpriv. Each refusal is exit 2 with one line naming the fix and nothing spawned; each
negative control shows the same setup passing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pods import STANDINS
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
NINE_VETHS = "ip link set lo up; " + "; ".join(
    f"ip link add v{i}a type veth peer name v{i}b; ip link set v{i}a up; ip link set v{i}b up"
    for i in range(9)
)
POD_IP = "10.9.0.5"
ON_FIFTH = f"ip addr add {POD_IP}/24 dev v4a"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
    reason="needs root, unshare, ip",
)


def recipe(tmp: Path, *, nodes: int = 1, store: str = "") -> Path:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    path = tmp / "recipe.yaml"
    path.write_text(
        f"name: host\nmodel: {{path: {model}}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    nodes: {nodes}\n    tensor_parallel: {nodes}\n    port: {free_port()}\n"
        f"    master_port: {free_port()}\n{store}"
    )
    return path


# No RDMA device and no master here: those checks (tests/unit/supervise/test_rdma.py,
# test_store_master.py) only warn, so these tests see the memory checks alone.
STORE = (
    "    mooncake_store:\n      config: {master_server_address: 'm:1', protocol: rdma,\n"
    "                global_segment_size: 1GB, local_buffer_size: 64MB}\n"
    "    host: {advisory: [rdma, store-master]}\n"
)


def launch(tmp: Path, wrapper: list[str], env: dict[str, str], seconds: float = 8) -> tuple[int, str]:
    """The launcher under a wrapper; stopped by SIGTERM after `seconds` if it got past preflight."""
    full = {
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp),
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_RUNTIME_DIR": str(tmp / "run"),
        "LLMD_SHM_DIR": "",
        "LLMD_TERMINATION_LOG": "",
        "LLMD_LOG_FORMAT": "text",
        "LLMD_PROBE_PORT": str(free_port()),
        **env,
    }
    done = subprocess.run(
        ["timeout", "-s", "TERM", str(seconds), *wrapper, sys.executable, "-m", "launcher", "run"],
        env=full, capture_output=True, text=True, timeout=seconds + 30, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def in_netns(setup: str) -> list[str]:
    return ["unshare", "-rn", "sh", "-c", f'{setup}; exec "$@"', "sh"]


@needs_root
def test_the_interface_that_holds_pod_ip_is_named(tmp_path: Path) -> None:
    env = {"LLMD_RECIPE_FILE": str(recipe(tmp_path)), "POD_IP": POD_IP}
    _code, out = launch(tmp_path, in_netns(f"{NINE_VETHS}; {ON_FIFTH}"), env)
    assert "network identity" in out and "interface=v4a" in out, out
    assert "GLOO_SOCKET_IFNAME" in out and "error:" not in out
    # The stand-in engine's interpreter has no vllm package: the catalogue check says so, and goes on.
    assert "flags were checked against vllm 0.32.0" in out and "LLMD_ALLOW_FLAGS" in out


@needs_root
def test_pod_ip_on_no_interface_is_refused(tmp_path: Path) -> None:
    env = {"LLMD_RECIPE_FILE": str(recipe(tmp_path)), "POD_IP": "10.9.9.9"}
    code, out = launch(tmp_path, in_netns(f"{NINE_VETHS}; {ON_FIFTH}"), env)
    assert code == 2, out
    assert "error: POD_IP: 10.9.9.9 is on none of this pod's interfaces" in out
    assert "v4a 10.9.0.5" in out and "engine started" not in out


@needs_root
@pytest.mark.parametrize(
    ("setup", "pod_ip", "words"),
    [
        ("ip link set v4a down", POD_IP, f"{POD_IP} is on v4a, which is down (flags: broadcast,multicast)"),
        ("ip link set v4b down", POD_IP, f"{POD_IP} is on v4a, which is up but has no carrier (flags: up,"),
        ("ip addr add fe80::5/64 dev v4a", "fe80::5", "fe80::5 on v4a is an IPv6 link-local address"),
    ],
    ids=["interface-down", "no-carrier", "ipv6-link-local"],
)  # fmt: skip
def test_pod_ip_on_an_interface_that_cannot_carry_traffic_is_refused(
    tmp_path: Path, setup: str, pod_ip: str, words: str
) -> None:
    """Issue #34: each passed preflight and the engine started on an address nothing reaches."""
    env = {"LLMD_RECIPE_FILE": str(recipe(tmp_path)), "POD_IP": pod_ip}
    code, out = launch(tmp_path, in_netns(f"{NINE_VETHS}; {ON_FIFTH}; {setup}"), env)
    assert code == 2, out
    assert f"error: POD_IP: {words}" in out and "engine started" not in out, out


@needs_root
def test_a_route_to_the_leader_through_another_nic_is_refused(tmp_path: Path) -> None:
    env = {
        "LLMD_RECIPE_FILE": str(recipe(tmp_path, nodes=2)),
        "POD_IP": POD_IP,
        "LWS_LEADER_ADDRESS": "10.8.0.1",
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "1",
        "LLMD_PARK_SECONDS": "0",  # the subject is the refusal, not parking (test_parking.py)
    }
    wrong = f"{NINE_VETHS}; {ON_FIFTH}; ip addr add 10.8.0.5/24 dev v2a"
    code, out = launch(tmp_path, in_netns(wrong), env)
    assert code == 2, out
    assert "the route to the leader 10.8.0.1 leaves through v2a" in out
    right = f"{NINE_VETHS}; ip addr add 10.8.0.5/24 dev v4a; ip addr add {POD_IP}/24 dev v4a"
    code, out = launch(tmp_path, in_netns(right), env)
    assert "leaves through" not in out and "interface=v4a" in out, out


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A child of this process's v1 memory cgroup (the launcher moves itself in via the wrapper)."""
    from launcher.supervise.host.memory import _cgroup_dirs

    dirs = [d for d, name in _cgroup_dirs("/proc/self") if name == "memory.limit_in_bytes"]
    if not dirs or not os.access(dirs[0], os.W_OK):
        pytest.skip("needs a writable cgroup v1 memory hierarchy")
    group = dirs[0] / f"llmd-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        yield group
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:  # a process still leaving it
                import time

                time.sleep(0.1)


def in_cgroup(group: Path) -> list[str]:
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs; exec "$@"', "sh"]


@needs_root
def test_a_store_larger_than_the_memory_limit_is_refused(tmp_path: Path, memory_cgroup: Path) -> None:
    env = {"LLMD_RECIPE_FILE": str(recipe(tmp_path, store=STORE)), "POD_IP": "127.0.0.1"}
    (memory_cgroup / "memory.limit_in_bytes").write_text(str(512 << 20))
    code, out = launch(tmp_path, in_cgroup(memory_cgroup), env)
    assert code == 2, out
    assert "error: container memory limit: the plan allocates 1.1 GiB on the host" in out
    assert "512.0 MiB" in out and "memory.limit_in_bytes" in out
    (memory_cgroup / "memory.limit_in_bytes").write_text(str(4 << 30))  # the control: it fits
    code, out = launch(tmp_path, in_cgroup(memory_cgroup), env)
    assert "memory limit" not in out and "plan ready" in out, out


@needs_root
def test_memlock_too_low_without_cap_ipc_lock_is_refused(tmp_path: Path) -> None:
    if not shutil.which("prlimit") or not shutil.which("setpriv"):
        pytest.skip("needs prlimit and setpriv")
    env = {"LLMD_RECIPE_FILE": str(recipe(tmp_path, store=STORE)), "POD_IP": "127.0.0.1"}
    no_cap = ["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]
    code, out = launch(tmp_path, ["prlimit", "--memlock=65536:65536", *no_cap], env)
    assert code == 2, out
    assert (
        "error: RLIMIT_MEMLOCK: is 64.0 KiB (hard 64.0 KiB) but each engine process registers 1.1 GiB" in out
    )
    # Controls: the hard limit allows it (the launcher raises its soft limit), or CAP_IPC_LOCK is held.
    small = STORE.replace("1GB", "1MB").replace("64MB", "1MB")  # 2 MiB: under this sandbox's 8 MiB hard limit
    small_env = {**env, "LLMD_RECIPE_FILE": str(recipe(tmp_path, store=small))}
    code, out = launch(tmp_path, ["prlimit", "--memlock=65536:8388608", *no_cap], small_env)
    assert "RLIMIT_MEMLOCK" not in out and "plan ready" in out, out
    code, out = launch(tmp_path, ["prlimit", "--memlock=65536:65536"], env)
    assert "RLIMIT_MEMLOCK" not in out and "plan ready" in out, out
