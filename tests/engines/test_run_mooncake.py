"""The real mooncake_master and mooncake_client (a DRAM donor) under `llm-d-launcher run`."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.engines.engine_venvs import VENVS
from tests.pods import LauncherPod
from tests.ports import free_port

pytestmark = pytest.mark.engines


def wait_for(url: str, pod: LauncherPod, pattern: str = "", timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        assert pod.proc is not None and pod.proc.poll() is None, pod.output()[-3000:]
        try:
            reply = httpx.get(url, timeout=2)
            text = reply.text
            if reply.status_code == 200 and re.search(pattern, text):
                return text
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never matched {pattern!r}; last: {text[:500]}\n{pod.output()[-3000:]}")


def test_master_reports_the_donors_segment_and_both_stop_cleanly(
    private_network: str, tmp_path: Path
) -> None:
    rpc, metrics, metadata, donor_rpc, donor_http = (free_port() for _ in range(5))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "name: mooncake-test\n"
        "model: {path: unused}\n"
        "default_pool: master\n"
        "pools:\n"
        "  master:\n"
        "    kind: mooncake-master\n"
        f"    port: {rpc}\n"
        f"    metrics_port: {metrics}\n"
        f"    http_metadata_port: {metadata}\n"
        "    args: {rpc_address: 127.0.0.1, metrics_host: 127.0.0.1}\n"
        "  donor:\n"
        "    kind: mooncake-donor\n"
        f"    master: 127.0.0.1:{rpc}\n"
        f"    metadata_server: http://127.0.0.1:{metadata}/metadata\n"
        "    protocol: tcp\n"
        "    global_segment_size: 256MB\n"
        f"    port: {donor_rpc}\n"
        f"    http_port: {donor_http}\n"
    )
    env = {
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": private_network,
        "LLMD_BIN_PATH": str(VENVS / "mooncake" / "bin"),
    }
    (tmp_path / "master").mkdir()
    (tmp_path / "donor").mkdir()
    master = LauncherPod(tmp_path / "master", {**env, "LLMD_POOL": "master"}).start()
    donor = None
    try:
        wait_for(f"http://127.0.0.1:{metrics}/health", master)
        donor = LauncherPod(tmp_path / "donor", {**env, "LLMD_POOL": "donor"}).start()
        assert wait_for(f"http://127.0.0.1:{donor_http}/health", donor, "healthy")
        summary = wait_for(f"http://127.0.0.1:{metrics}/metrics/summary", master, r"/ 256\.00 MB.*Clients: 1")
        assert "Mem Storage: 0 B / 256.00 MB" in summary
        prometheus = httpx.get(f"http://127.0.0.1:{metrics}/metrics").text
        assert re.search(rf"^master_total_capacity_bytes {256 * 1024 * 1024}(\.0)?$", prometheus, re.M)

        donor.signal(signal.SIGTERM)
        assert donor.finish(timeout=30) == 0, donor.output()[-3000:]
        assert donor.leftovers() == []
        started = time.monotonic()
        master.signal(signal.SIGTERM)
        assert master.finish(timeout=30) == 0, master.output()[-3000:]
        assert time.monotonic() - started < 10
        assert master.leftovers() == []
        assert "mooncake-master | " in master.output()  # the binary's own log lines, named
    finally:
        for pod in (master, donor):
            if pod is not None:
                pod.kill_everything()
