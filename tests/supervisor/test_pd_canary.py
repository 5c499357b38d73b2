"""The optional P/D canary (LLMD_PD_CANARY_PREFILLER) over a decode pod: the canary goes through the
STAND-IN disagg sidecar (tests/standins/llm-d-router-disagg-sidecar, following llm-d/llm-d-router
pkg/sidecar/proxy) with the x-prefiller-host-port header, so its prefill leg reaches a second STAND-IN
engine (the prefill pod) and its decode leg this pod's engine. Counted as ok while the prefill pod
answers, as failed once it is gone, and never a verdict: the decode pod stays live and ready."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.pods import STANDINS
from tests.ports import free_port
from tests.supervisor.test_decode_pod import _decode_pod

FAST = {"LLMD_STALL_SECONDS": "1", "LLMD_CANARY_SECONDS": "2", "LLMD_CHECK_INTERVAL": "0.2"}


def _counted(pod_metrics: str, outcome: str) -> float:
    found = re.search(
        rf'llmd_launcher_pd_canary_total\{{outcome="{outcome}",pool="decode",role="[^"]+"\}} (\S+)',
        pod_metrics,
    )
    assert found, pod_metrics
    return float(found.group(1))


@pytest.mark.parametrize("fields", ["args: {secure-proxy: false}", "tls: true"])
def test_the_pd_canary_proves_the_two_step_path_and_never_ends_the_pod(tmp_path: Path, fields: str) -> None:
    port, prefill_log = free_port(), tmp_path / "prefill.out"
    with prefill_log.open("w") as out:
        prefill = subprocess.Popen(
            [sys.executable, str(STANDINS / "vllm"), "serve", "m", "--port", str(port)], stdout=out
        )
    pod = _decode_pod(tmp_path, {**FAST, "LLMD_PD_CANARY_PREFILLER": f"127.0.0.1:{port}"}, fields).start()
    try:
        live = pod.wait_probe(
            "livez",
            200,
            timeout=30,
            until=lambda b: b.get("pd_canary", {}).get("counts", {}).get("ok", 0) >= 1,
        )
        assert live["pd_canary"]["prefiller"] == f"127.0.0.1:{port}", live
        assert "stand-in completion started" in prefill_log.read_text()  # the prefill leg reached the peer
        metrics = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
        assert _counted(metrics, "ok") >= 1 and _counted(metrics, "failed") == 0

        prefill.kill()  # the peer is gone: counted as failed, and the decode pod is not judged for it
        live = pod.wait_probe(
            "livez", 200, timeout=30, until=lambda b: b["pd_canary"]["counts"]["failed"] >= 2
        )
        assert "HTTP 502" in live["pd_canary"]["latest"], live
        assert pod.probe("readyz")[0] == 200
        metrics = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
        assert _counted(metrics, "failed") >= 2
        assert "P/D canary failed: HTTP 502 (never a verdict)" in pod.output()
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0, pod.output()
    finally:
        prefill.kill()
        prefill.wait()
        pod.kill_everything()
