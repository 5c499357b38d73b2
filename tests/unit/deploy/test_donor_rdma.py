"""The Mooncake donor as deploy/ ships it agrees with its own preflight: its recipe's store protocol is
rdma, so the DaemonSet claims an RDMA NIC of its own; the donor's plan (the manifest's env, the recipe
ConfigMap's file) passes the host preflight on a pod holding the NICs that claim brings (a STAND-IN
sysfs tree, tests/unit/supervise/rdma_sysfs.py: no RDMA device exists here) and names them to
mooncake_client, and is refused, with the fix, on a pod without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.supervise.host import check_host
from roles import FoundInPod, build_plan
from tests.manifests import container_env
from tests.unit.deploy.test_manifests import COMPONENTS, OVERLAY, with_components
from tests.unit.supervise.rdma_sysfs import make_tree, roce

DONORS = COMPONENTS / "mooncake-donors"
RDMA_CLASSES = {"mrdma.google.com"}  # GKE managed DRANET's RDMA NICs (overlays/gke-a4x-max/rdma-nic.yaml)


def rendered_donors() -> list[dict[str, Any]]:
    """The GKE A4X-Max overlay with the donors' component, as a kustomization of the user's renders it."""
    return [d for d in yaml.safe_load_all(with_components(OVERLAY, ("mooncake-donors",))) if d]


def donor_and_claims(
    docs: list[dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The donor's pod spec, its container, and the device requests of every claim the container uses."""
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    by_name = {c["name"]: c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims", [])}
    requests = []
    for claim in container.get("resources", {}).get("claims", []):
        template = templates[by_name[claim["name"]]]  # a claim the rendering does not hold: KeyError
        requests += [
            r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]
        ]  # resource.k8s.io/v1
    return spec, container, requests


def donor_plan_inputs(container: dict[str, Any]) -> tuple[Settings, Any]:
    env = container_env(container)
    assert env["LLMD_RECIPE_FILE"] == "/etc/llm-d-launcher/recipe.yaml"  # the ConfigMap of recipe.yaml
    recipe = load_recipe(RecipeSource("kimi-k3.1-pro", str(DONORS / "recipe.yaml")))
    return Settings(pool=env["LLMD_POOL"], pod_ip="10.64.3.7"), recipe


def nics(count: int) -> list[Any]:
    """What the claim brings into the pod: that many RoCE NICs, as GKE's A4X-Max NICs look in sysfs."""
    return [roce(f"mlx5_{i}", f"uverbs{i}", f"eth{i + 1}", f"10.1.{i}.7") for i in range(count)]


def test_a_donor_with_protocol_rdma_ships_with_an_rdma_nic_claim() -> None:
    spec, container, requests = donor_and_claims(rendered_donors())
    settings, recipe = donor_plan_inputs(container)
    donor = recipe.pools[settings.pool]
    assert getattr(donor, "protocol", None) == "rdma"
    rdma = [r for r in requests if r["deviceClassName"] in RDMA_CLASSES]
    assert rdma and sum(r["count"] for r in rdma) >= 1, "protocol rdma, but the donor claims no RDMA NIC"
    # The engines' NICs are not the donors': only the nodes labelled for donors run one.
    assert spec["nodeSelector"] == {"llm-d.ai/mooncake-donor": "true"}


def test_the_donors_preflight_passes_with_the_claimed_nics_and_names_them(tmp_path: Path) -> None:
    _, container, requests = donor_and_claims(rendered_donors())
    count = sum(r["count"] for r in requests if r["deviceClassName"] in RDMA_CLASSES)
    sysfs, dev = make_tree(tmp_path / "pod", nics(count))
    settings, recipe = donor_plan_inputs(container)
    report = check_host(build_plan(settings, recipe), "", sysfs, dev)
    assert report.problems == [] and [p.name for p in report.rdma] == [f"mlx5_{i}:1" for i in range(count)]
    spawned = build_plan(settings, recipe, found=FoundInPod(rdma=report.rdma)).engine
    names = ",".join(f"mlx5_{i}" for i in range(count))
    assert f"--device_names={names}" in spawned.argv
    assert spawned.env["MC_GID_INDEX"] == "3"  # the RoCE v2 GID of the NIC's IPv4 address


@pytest.mark.parametrize("visible_but_not_given", [False, True])
def test_the_donors_preflight_refuses_a_pod_without_them(tmp_path: Path, visible_but_not_given: bool) -> None:
    """No RDMA device at all, or the node's NICs visible in sysfs without their verbs nodes in the
    container (the engines' NICs, as a donor on an engine's node would see them)."""
    _, container, _ = donor_and_claims(rendered_donors())
    devices = (
        [roce("mlx5_0", "uverbs0", "eth1", "10.1.0.7", in_container=False)] if visible_but_not_given else []
    )
    sysfs, dev = make_tree(tmp_path / "pod", devices)
    settings, recipe = donor_plan_inputs(container)
    report = check_host(build_plan(settings, recipe), "", sysfs, dev)
    (problem,) = report.problems
    assert problem.setting == "rdma" and "needs an RDMA device" in problem.message
    assert "RDMA NICs of its own" in problem.fix and "every pool of its store" in problem.fix
