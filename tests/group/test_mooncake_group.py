"""Mooncake for real: `mooncake_master` as a Deployment's pod behind a Service called mooncake-master,
and a `mooncake_client` DRAM donor (the DaemonSet's pod) in a namespace of its own that reaches the
master by that Service's DNS name, both under `llm-d-launcher run` through `local-group --service`;
and the master restarted under the running donor."""

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


def _start_in_netns_of(
    pid: int, argv: list[str], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_donor_exits_to_register_again_when_its_master_restarts(start_group: Any, tmp_path: Path) -> None:
    """The master's pod is recreated (same Service, same IP) with an empty state: the donor's
    launcher finds its marker gone from the metadata server and exits 7, so its container restarts
    and registers its segment again (kvcache-ai/Mooncake#2246: the running client does not)."""
    run = start_group(
        _recipe(tmp_path),
        "--pool", "donor", "--size", "1", "--service", "mooncake-master=mooncake-master",
        env={"LLMD_BIN_PATH": str(VENVS / "mooncake" / "bin"), "LLMD_CHECK_INTERVAL": "1"},
    )  # fmt: skip
    run.wait_ready(timeout=120)
    launcher = run.launcher(1)
    master = next(c for c in launcher.children() if any("mooncake_master" in a for a in c.cmdline()))
    argv, env = master.cmdline(), master.environ()
    network = _start_in_netns_of(launcher.pid, ["sleep", "600"])  # keeps the pod's IP once it exits
    replacement = None
    try:
        time.sleep(3)  # a few marker reads that succeed
        assert run.exit_code(0) is None, run.digest()
        master.send_signal(signal.SIGKILL)  # the master's pod dies and is recreated
        run.wait("the master's pod exited", lambda: run.exit_code(1) is not None, timeout=30)
        killed = time.monotonic()
        replacement = _start_in_netns_of(network.pid, argv, env)
        run.wait("the donor exited", lambda: run.exit_code(0) is not None, timeout=60)
        print(f"donor exited {time.monotonic() - killed:.1f} s after the master was killed")
        assert run.exit_code(0) == 7, run.digest()
        assert run.termination(0).startswith(
            "mooncake master mooncake-master:8700 restarted and lost this pod's registration"
        ), run.termination(0)
        assert "store master restarted" in run.pod_output(0)
    finally:
        for process in (replacement, network):
            if process is not None:
                process.kill()
                process.wait()
    tag = run.manifest()["tag"]
    run.stop()
    assert leftovers(tag) == []
