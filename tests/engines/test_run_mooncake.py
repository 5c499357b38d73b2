"""The real mooncake_master and mooncake_client (a DRAM donor) under `llm-d-launcher run`."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.engines.engine_venvs import VENVS
from tests.mooncake_recipe import mooncake_recipe
from tests.pods import LauncherPod
from tests.polling import wait_for
from tests.ports import free_port

pytestmark = pytest.mark.engines


def get(url: str) -> str | None:
    try:
        reply = httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return None
    return reply.text if reply.status_code == 200 else None


def wait_on(pod: LauncherPod, url: str, pattern: str = "") -> str:
    return wait_for(url, get, lambda: pod.proc is not None and pod.proc.poll() is None, pod.output, pattern)


def test_master_reports_the_donors_segment_and_both_stop_cleanly(
    private_network: str, tmp_path: Path
) -> None:
    rpc, metrics, metadata, donor_rpc, donor_http = (free_port() for _ in range(5))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(mooncake_recipe(rpc, metrics, metadata, donor_rpc, donor_http))
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
        wait_on(master, f"http://127.0.0.1:{metrics}/health")
        donor = LauncherPod(tmp_path / "donor", {**env, "LLMD_POOL": "donor"}).start()
        assert wait_on(donor, f"http://127.0.0.1:{donor_http}/health", "healthy")
        summary = wait_on(master, f"http://127.0.0.1:{metrics}/metrics/summary", r"/ 256\.00 MB.*Clients: 1")
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
