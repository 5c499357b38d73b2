"""Mooncake for real: `mooncake_master` as a Deployment's pod behind a Service called mooncake-master,
and a `mooncake_client` DRAM donor (the DaemonSet's pod) in a namespace of its own that reaches the
master by that Service's DNS name, both under `llm-d-launcher run` through `local-group --service`."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engines.engine_venvs import VENVS
from tests.group.conftest import leftovers

pytestmark = pytest.mark.group
SEGMENT = 256 * 1024 * 1024


def test_a_donor_reaches_the_master_by_its_service_name(start_group: Any, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
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
