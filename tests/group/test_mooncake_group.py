"""Mooncake for real: `mooncake_master` as a Deployment's pod behind a Service called mooncake-master,
and a `mooncake_client` DRAM donor (the DaemonSet's pod) in a namespace of its own that reaches the
master by that Service's DNS name, both under `llm-d-launcher run` through `local-group --service`;
and the master restarted under the running donor, which exits, is started again in its pod and
registers its segment with the new master."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engines.engine_venvs import VENVS
from tests.group.conftest import leftovers

pytestmark = pytest.mark.group
SEGMENT = 256 * 1024 * 1024


def _recipe(directory: Path) -> Path:
    """A master (the Service's pod) and a TCP DRAM donor of 256 MB that reaches it by name."""
    recipe = directory / "recipe.yaml"
    recipe.write_text(
        "name: mooncake-group\n"
        "model: {path: unused}\n"
        "default_pool: donor\n"
        "pools:\n"
        "  mooncake-master:\n"
        "    kind: mooncake-master\n"
        "    port: 8700\n"
        "    metrics_port: 9003\n"
        "    http_metadata_port: 8080\n"
        "  donor:\n"
        "    kind: mooncake-donor\n"
        "    master: mooncake-master:8700\n"
        "    metadata_server: http://mooncake-master:8080/metadata\n"
        "    protocol: tcp\n"
        "    global_segment_size: 256MB\n"
        "    port: 50052\n"
        "    http_port: 9300\n"
    )
    return recipe


def test_a_donor_reaches_the_master_by_its_service_name(start_group: Any, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    run = start_group(
        recipe,
        "--pool", "donor", "--size", "1", "--service", "mooncake-master=mooncake-master",
        env={"LLMD_BIN_PATH": str(VENVS / "mooncake" / "bin")},
    )  # fmt: skip
    took = run.wait_ready(timeout=120)
    print(f"master and donor ready {took:.1f} s after the runner started")
    donor, master = run.pods()
    assert (donor["name"], master["name"]) == ("mooncake-group-donor-0", "mooncake-master")
    assert "mooncake-master:8700" in run.pod_output(0)  # the donor was given the Service's name
    deadline, metrics = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        metrics = httpx.get(f"http://{master['ip']}:9003/metrics", timeout=5).text
        if re.search(rf"^master_total_capacity_bytes {SEGMENT}(\.0)?$", metrics, re.M):
            break
        time.sleep(0.5)
    assert re.search(rf"^master_total_capacity_bytes {SEGMENT}(\.0)?$", metrics, re.M), metrics[-2000:]
    tag = run.manifest()["tag"]
    assert run.stop() == 0, run.digest()
    assert [run.exit_code(0), run.exit_code(1)] == [0, 0]
    assert leftovers(tag) == []


def _in_namespaces_of(pid: int, argv: list[str]) -> subprocess.Popen[bytes]:
    """argv in the network namespace of process pid: its pod's."""
    return subprocess.Popen(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip


# A store client as an engine's MooncakeStoreConnector is one (kvcache-ai/Mooncake mooncake-store
# python API MooncakeDistributedStore.setup): it donates nothing (global_segment_size 0), so what it
# puts lands on the donor's segment, and reading it back goes through the donor's transfer metadata.
ROUND_TRIP = """
import sys
from mooncake.store import MooncakeDistributedStore
host, metadata, master, key = sys.argv[1:5]
store = MooncakeDistributedStore()
if store.setup(host, metadata, 0, 16 * 1024 * 1024, "tcp", "", master) != 0:
    sys.exit("setup failed")
value = key.encode() * 512
put = store.put(key, value)
got = store.get(key)
print(f"put={put} got={len(got)} bytes, equal={got == value}")
sys.exit(0 if put == 0 and got == value else 1)
"""


def _round_trip(netns_of: int, host: str, master_ip: str, key: str) -> subprocess.CompletedProcess[str]:
    """A put and a get through the store, from a client in the network of process netns_of."""
    python = str(VENVS / "mooncake" / "bin" / "python")
    argv = ["nsenter", f"--net=/proc/{netns_of}/ns/net", "--", python, "-c",
            ROUND_TRIP, host, f"http://{master_ip}:8080/metadata", f"{master_ip}:8700", key]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _capacity(master_ip: str) -> str | None:
    try:
        metrics = httpx.get(f"http://{master_ip}:9003/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    found = re.search(r"^master_total_capacity_bytes (\S+)$", metrics, re.M)
    return found[1] if found else None


def test_a_donor_registers_again_with_a_restarted_master(start_group: Any, tmp_path: Path) -> None:
    """Both pods as Kubernetes runs them (restartPolicy Always: the Deployment's and the DaemonSet's
    pods restart their container in place). The master is killed and comes back (same Service, same
    IP) with an empty state; the donor's launcher finds its marker gone from the metadata server and
    exits 7, its container starts again, registers its segment with the new master, and a store
    client's put and get go through it (kvcache-ai/Mooncake#2246: a restarted master's metadata is
    empty while the old clients keep running; #1336: only a new registration brings a segment back)."""
    run = start_group(
        _recipe(tmp_path),
        "--pool", "donor", "--size", "1", "--service", "mooncake-master=mooncake-master",
        "--restart-policy", "Always",
        env={"LLMD_BIN_PATH": str(VENVS / "mooncake" / "bin"), "LLMD_CHECK_INTERVAL": "1"},
    )  # fmt: skip
    run.wait_ready(timeout=120)
    donor_pod, master_pod = run.pods()
    master = next(c for c in run.launcher(1).children() if any("mooncake_master" in a for a in c.cmdline()))
    client_netns = _in_namespaces_of(run.launcher(1).pid, ["sleep", "600"])  # a client in the master's pod
    try:
        before = _round_trip(client_netns.pid, master_pod["ip"], master_pod["ip"], "before")
        assert before.returncode == 0, before.stdout + before.stderr  # a control: the client works
        master.send_signal(signal.SIGKILL)  # the master's container dies, and is started again
        killed = time.monotonic()
        run.wait("both pods restarted", lambda: [p["restarts"] for p in run.pods()] == [1, 1], timeout=60)
        donor = run.pods()[0]
        assert donor["last_exit_code"] == 7, run.digest()
        assert donor["last_termination"].startswith(
            "mooncake master mooncake-master:8700 restarted and lost this pod's registration"
        ), donor["last_termination"]
        assert "store master restarted" in run.pod_output(0)
        run.wait_ready(timeout=120)
        registered = (str(SEGMENT), f"{SEGMENT}.0")
        run.wait("its segment registered", lambda: _capacity(master_pod["ip"]) in registered, timeout=30)
        print(f"donor registered again {time.monotonic() - killed:.1f} s after the master was killed")
        after = _round_trip(client_netns.pid, master_pod["ip"], master_pod["ip"], "after")
        assert after.returncode == 0, after.stdout + after.stderr + run.digest()
        assert run.pods()[0]["ip"] == donor_pod["ip"]  # the same pod, its container started again
    finally:
        client_netns.kill()
        client_netns.wait()
    tag = run.manifest()["tag"]
    run.stop()
    assert leftovers(tag) == []
