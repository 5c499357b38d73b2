"""Bounded canaries (issue #40 item 3): a STAND-IN disagg sidecar answering every P/D canary with a
512 MiB body (tests/standins/llm-d-router-disagg-sidecar flood=512). The launcher reads the head of an
answer only (healthchecks/canary.py CANARY_BODY_BYTES), so its resident memory stays under 100 MiB
(psutil, sampled while the canaries run; the number is printed) and the canary is still counted."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil

from tests.ports import free_port
from tests.supervisor.test_decode_pod import _decode_pod
from tests.supervisor.test_pd_canary import FAST

BOUND_MIB = 100


def test_a_512_mib_canary_answer_keeps_the_launcher_under_100_mib(tmp_path: Path) -> None:
    env = {**FAST, "LLMD_PD_CANARY_PREFILLER": f"127.0.0.1:{free_port()}", "STANDIN_SIDECAR": "flood=512"}
    pod = _decode_pod(tmp_path, env).start()
    try:
        assert pod.proc is not None
        launcher = psutil.Process(pod.proc.pid)
        peak, until = 0, time.monotonic() + 60
        while time.monotonic() < until:
            peak = max(peak, launcher.memory_info().rss)
            status, body = pod.probe("livez")
            if status == 200 and body.get("pd_canary", {}).get("counts", {}).get("ok", 0) >= 3:
                break
            time.sleep(0.05)
        print(f"launcher peak RSS with 512 MiB canary answers: {peak / 2**20:.1f} MiB")
        assert body["pd_canary"]["counts"]["ok"] >= 3, (body, pod.output())
        assert peak < BOUND_MIB << 20, f"{peak / 2**20:.1f} MiB"
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0, pod.output()
    finally:
        pod.kill_everything()
