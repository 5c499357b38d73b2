"""The sglang-tpu image (images/engine.Dockerfile, images/targets.txt), built on the SGLang STAND-IN
base (tests/images/standins: SGLang 0.5.23's
parser on CPU torch; no TPU, so no engine is served here), run as deploy/kimi-k3.1-pro/tpu/tpu.yaml runs it:
`plan` plans the TPU leader, and the image checks flags against the catalogue it built from its own
SGLang, readable by a non-root user too."""

from __future__ import annotations

from tests.images.conftest import POD, RUN_AS_IMAGE_USER, SGLANG_IMAGE, MakeContainer, planned
from tests.images.podman import podman
from tests.manifests import manifest_env

MANIFEST_ENV = manifest_env("deploy/kimi-k3.1-pro/tpu/tpu.yaml")
BUILT = "/opt/llm-d-launcher/catalogs/sglang-server-0.5.23.json"  # `catalog build` in the Dockerfile


def test_plan_prints_the_tpu_leaders_plan(container: MakeContainer) -> None:
    out = planned(container, SGLANG_IMAGE, "deploy/kimi-k3.1-pro/tpu/recipe.yaml", MANIFEST_ENV)
    assert out.startswith("# recipe kimi-k3.1-pro | pool tpu | role tpu-leader | worker 0 of 4")
    assert "sglang.launch_server" in out


def test_version_names_the_catalogue_built_from_the_images_sglang() -> None:
    out = podman("run", "--rm", "--network=none", *POD, *RUN_AS_IMAGE_USER, SGLANG_IMAGE, "version").stdout
    catalogues = [line for line in out.splitlines() if line.startswith("engine catalogue")]
    print("\n".join(catalogues))
    assert (
        catalogues[0]
        == f"engine catalogue sglang-server: sglang.launch_server 0.5.23 (built in this image: {BUILT})"
    )
