"""Every image runs `llm-d-launcher` with `run` as its default command, so `docker run IMAGE plan
--group` works, and every manifest still starts `run` (Kubernetes: `command` replaces the image's
ENTRYPOINT and drops its CMD; `args` replaces the CMD)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.test_manifests import WORKLOADS, pod_templates

IMAGES = Path(__file__).resolve().parents[3] / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))


def exec_form(dockerfile: Path, instruction: str) -> list[str] | None:
    """The last ENTRYPOINT or CMD of the final stage, in exec (JSON) form; None when absent."""
    final_stage = re.split(r"^FROM ", dockerfile.read_text(), flags=re.M)[-1]
    lines = re.findall(rf"^{instruction} (.*)$", final_stage, flags=re.M)
    if not lines:
        return None
    value: list[str] = json.loads(lines[-1])  # a shell-form line is no JSON, and fails here
    return value


def targets() -> dict[str, Path]:
    """images/targets.txt: each image's name -> its Dockerfile."""
    rows = [line.split() for line in (IMAGES / "targets.txt").read_text().splitlines()]
    return {row[0]: IMAGES / f"{row[2]}.Dockerfile" for row in rows if row and not row[0].startswith("#")}


def test_one_image_per_guide_base_each_with_its_dockerfile() -> None:
    assert set(targets()) == {
        "vllm-gpu", "vllm-gpu-kimi", "vllm-cpu", "vllm-tpu", "sglang-gpu", "sglang-tpu", "mooncake"
    }  # fmt: skip
    assert set(targets().values()) == set(DOCKERFILES)


def test_deploy_pulls_only_images_of_the_targets() -> None:
    """What the images tier builds (tests/images/build.sh builds every row) is what deploy/ pulls."""
    pulled = {
        match
        for path in (IMAGES.parent / "deploy").rglob("*.yaml")
        for match in re.findall(r"ghcr\.io/llm-d/llm-d-launcher-([a-z0-9-]+)", path.read_text())
    }
    assert pulled and pulled <= set(targets()), pulled - set(targets())


def _dockerfile_of(image: str) -> Path:
    """ghcr.io/llm-d/llm-d-launcher-vllm-gpu:0.1.0 -> images/engine.Dockerfile (images/targets.txt)"""
    name = image.rsplit("/", 1)[-1].split(":", 1)[0].removeprefix("llm-d-launcher-")
    return targets()[name]


def started_argv(container: dict[str, Any]) -> list[str]:
    dockerfile = _dockerfile_of(container["image"])
    entrypoint = container.get("command") or exec_form(dockerfile, "ENTRYPOINT") or []
    default_args = [] if "command" in container else exec_form(dockerfile, "CMD") or []
    return [*entrypoint, *container.get("args", default_args)]


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_every_manifest_container_starts_run(name: str, doc: dict[str, Any]) -> None:
    for template in pod_templates(doc):
        for container in template["spec"]["containers"]:
            assert started_argv(container) == ["llm-d-launcher", "run"], container["name"]
