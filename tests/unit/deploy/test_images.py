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


def test_there_are_images() -> None:
    assert {d.name for d in DOCKERFILES} >= {
        "vllm-gpu.Dockerfile",
        "sglang-tpu.Dockerfile",
        "mooncake.Dockerfile",
    }


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[d.stem for d in DOCKERFILES])
def test_the_entrypoint_is_the_launcher_and_run_the_default_command(dockerfile: Path) -> None:
    assert exec_form(dockerfile, "ENTRYPOINT") == ["llm-d-launcher"]
    assert exec_form(dockerfile, "CMD") == ["run"]


def _dockerfile_of(image: str) -> Path:
    """ghcr.io/llm-d/llm-d-launcher-vllm-gpu:0.1.0 -> images/vllm-gpu.Dockerfile"""
    name = image.rsplit("/", 1)[-1].split(":", 1)[0].removeprefix("llm-d-launcher-")
    return IMAGES / f"{name}.Dockerfile"


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
