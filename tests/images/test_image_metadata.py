"""What each image of images/targets.txt declares and holds: ENTRYPOINT/CMD, stop signal, user and labels as
images/README.md says; a size within its budget; and nothing of the build left in the layers the
Dockerfile added (no wheel, .deb, pip or apt configuration of the build, constraints file or pip
cache; no secret in the environment or the history)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.images.conftest import TARGETS
from tests.images.podman import PREFIX, inspect_image, podman

MB = 1_000_000


@dataclass(frozen=True)
class Expected:
    name: str  # images/targets.txt's
    user: str  # "" keeps the base image's (root in vllm/vllm-openai and lmsysorg/sglang)
    budget: int  # bytes the Dockerfile may add on top of its (stand-in) base (measured + margin)

    @property
    def image(self) -> str:
        return f"{PREFIX}/{self.name}:run"


BUDGETS = {  # measured on the stand-in bases (bench/results/images.md)
    "vllm-gpu": 500 * MB,  # measured 242 MB: nixl-cu13 + the sidecar
    "vllm-gpu-kimi": 900 * MB,  # measured 591 MB: + CUDA Mooncake and fastsafetensors
    "mooncake": 250 * MB,  # measured 200 MB
}
IMAGES = [Expected(n, "10001:10001" if n == "mooncake" else "", BUDGETS.get(n, 100 * MB)) for n in TARGETS]
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.I)


def base_of(image: dict[str, object]) -> str:
    labels = image["Config"]["Labels"]  # type: ignore[index]
    return str(labels["org.opencontainers.image.base.name"])


@pytest.mark.parametrize("expected", IMAGES, ids=lambda e: e.name)
def test_entrypoint_user_labels_and_size(expected: Expected) -> None:
    image = inspect_image(expected.image)
    config = image["Config"]
    assert config["Entrypoint"] == ["llm-d-launcher"] and config["Cmd"] == ["run"]
    assert config.get("StopSignal") == "SIGTERM"
    assert config.get("User", "") == expected.user
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == f"llm-d-launcher {expected.name}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert {"org.opencontainers.image.source", "org.opencontainers.image.revision"} <= set(labels)
    assert "Healthcheck" not in config or not config["Healthcheck"]  # Kubernetes probes, not Docker's
    base = inspect_image(base_of(image))
    added = image["Size"] - base["Size"]
    print(f"{expected.image}: {image['Size'] / MB:.0f} MB, {added / MB:.0f} MB over {base_of(image)}")
    assert added <= expected.budget, (
        f"{added / MB:.0f} MB added, over the {expected.budget / MB:.0f} MB budget"
    )
    assert not [name for name in (e.split("=", 1)[0] for e in config.get("Env", [])) if SECRET.search(name)]
    history = podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", expected.image).stdout
    assert not re.search(r"(TOKEN|SECRET|PASSWORD|_KEY)=\S", history)


def added_layers(image: dict[str, object]) -> list[Path]:
    """The overlay diff folders of the layers the Dockerfile added on top of its base."""
    data = image["GraphDriver"]["Data"]  # type: ignore[index]
    folders = [data["UpperDir"], *(data.get("LowerDir", "").split(":") if data.get("LowerDir") else [])]
    count = len(image["RootFS"]["Layers"]) - len(inspect_image(base_of(image))["RootFS"]["Layers"])  # type: ignore[index]
    return [Path(folder) for folder in folders[:count]]


# Build inputs (tests/images/build.sh mounts them; the Dockerfiles bind-mount the launcher's wheel):
# none may stay in a layer. podman 4.3 leaves each bind mount's target as an empty file or folder
# (BuildKit does not); anything in them would be a leak.
LEFT_BEHIND = re.compile(
    r"\.(whl|deb)$|^tmp/base-constraints\.txt$|^root/\.cache/pip/|^(wheels|debs)/.|^tmp/llm-d-launcher-dist/."
    r"|^var/lib/apt/lists/[^/]*_Packages|^var/cache/apt/archives/[^/]+\.deb$"
)


@pytest.mark.parametrize("expected", IMAGES, ids=lambda e: e.name)
def test_nothing_of_the_build_is_left_in_a_layer(expected: Expected) -> None:
    image = inspect_image(expected.image)
    leaks: list[str] = []
    for layer in added_layers(image):
        assert layer.is_dir(), layer
        for folder, _, files in os.walk(layer):
            for name in files:
                path = os.path.relpath(os.path.join(folder, name), layer)
                if LEFT_BEHIND.search(path):
                    leaks.append(path)
                if path in ("etc/pip.conf", "etc/apt/sources.list.d/0000debian.sources"):
                    text = Path(folder, name).read_text(errors="replace")
                    if "/wheels" in text or "file:/debs" in text:
                        leaks.append(f"{path}: the build's own")
    assert leaks == []
