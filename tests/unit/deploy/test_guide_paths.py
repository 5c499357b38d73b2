"""What every deploy/ path owes the guide it follows, whatever its form (Deployment, LeaderWorkerSet,
DisaggregatedSet, Job): the guide's object names (other guides target them: the workload-autoscaling
guide's KEDA ScaledObject scales `optimized-baseline-nvidia-gpu-vllm-decode`), no Service env on any pod,
and `USER=llm-d` on every vLLM GPU/CPU container, as llm-d's vLLM image components add it."""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe_file import RecipeSource, builtin_recipe_text, load_recipe
from tests.manifests import container_env
from tests.unit.deploy.test_launcher_pods import templates
from tests.unit.deploy.test_lint import lint
from tests.unit.deploy.test_manifests import HASHED, ROOT, kustomize, mounted_recipe
from tests.unit.deploy.test_pools import compile_recipes

# Every kustomization of deploy/ that renders alone (components render inside the Kimi tests' combinations).
PATHS = sorted(
    p.parent
    for p in (ROOT / "deploy").glob("**/kustomization.yaml")
    if yaml.safe_load(p.read_text())["kind"] == "Kustomization"
)
RENDERED = {p.relative_to(ROOT).as_posix(): [d for d in yaml.safe_load_all(kustomize(p)) if d] for p in PATHS}

# The guides' model-server Deployment names: namePrefix + the base's `decode` (llm-d/llm-d).
GUIDE_DEPLOYMENTS = {
    # guides/optimized-baseline/modelserver/cpu/vllm/base/kustomization.yaml @2ad7f919
    "deploy/optimized-baseline-cpu-vllm": "optimized-baseline-cpu-vllm-decode",
    # guides/optimized-baseline/modelserver/gpu/vllm/base/kustomization.yaml @05b03f75; the target of
    # guides/workload-autoscaling/keda-epp/optimized-baseline/base/scaledobject.yaml @b0d6a794
    "deploy/optimized-baseline-gpu-vllm": "optimized-baseline-nvidia-gpu-vllm-decode",
    # guides/optimized-baseline/modelserver/gpu/sglang/base/kustomization.yaml (llm-d/llm-d's copy is not
    # in the code index; its fork zetxqx/llm-d @52615f79 holds it)
    "deploy/optimized-baseline-gpu-sglang": "optimized-baseline-nvidia-gpu-sglang-decode",
    # guides/optimized-baseline/modelserver/tpu/v7/vllm/base/kustomization.yaml @14ecef08
    "deploy/optimized-baseline-tpu-v7-vllm": "optimized-baseline-tpu-v7-vllm-decode",
    # guides/tiered-prefix-cache/modelserver/gpu/vllm/base/kustomization.yaml @50807b48
    "deploy/tiered-prefix-cache-gpu-vllm": "gpu-vllm-decode",
    # guides/precise-prefix-cache-routing/modelserver/{cpu,gpu}/{vllm,sglang}/base/kustomization.yaml
    # (tests/fixtures/guides/precise-prefix-cache-routing-*.yaml cite the commits)
    "deploy/precise-prefix-cache-routing-cpu-vllm": "precise-prefix-cache-routing-cpu-vllm-decode",
    "deploy/precise-prefix-cache-routing-gpu-vllm": "precise-prefix-cache-routing-gpu-vllm-decode",
    "deploy/precise-prefix-cache-routing-gpu-sglang": "precise-prefix-cache-routing-gpu-sglang-decode",
}


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path}#{doc['kind']}/{doc['metadata']['name']}:{where}", template)
        for path, docs in RENDERED.items()
        for doc in docs
        for where, template in [*templates(doc), *job_template(doc)]
    ]


def job_template(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("template", doc["spec"]["template"])] if doc["kind"] == "Job" else []


POD_TEMPLATES = pod_templates()


@pytest.mark.parametrize("path", GUIDE_DEPLOYMENTS)
def test_the_model_server_deployment_has_the_guides_name(path: str) -> None:
    """Launcher-run Deployments (the precise-prefix SGLang path also ships the guide's render pool)."""
    names = [
        d["metadata"]["name"]
        for d in RENDERED[path]
        if d["kind"] == "Deployment"
        and "LLMD_POOL" in container_env(d["spec"]["template"]["spec"]["containers"][0])
    ]
    assert names == [GUIDE_DEPLOYMENTS[path]]


def test_every_guide_deployment_path_is_named_above() -> None:
    """Those of a built-in recipe (Kimi's one Deployment is its Mooncake master, named by its guide)."""
    launcher_deployments = {
        path
        for path, docs in RENDERED.items()
        for d in docs
        if d["kind"] == "Deployment"
        and "LLMD_RECIPE" in container_env(d["spec"]["template"]["spec"]["containers"][0])
    }
    assert launcher_deployments == set(GUIDE_DEPLOYMENTS)


@pytest.mark.parametrize(("name", "template"), POD_TEMPLATES, ids=[n for n, _ in POD_TEMPLATES])
def test_no_pod_gets_service_env(name: str, template: dict[str, Any]) -> None:
    """Launcher, render and verification pods alike: a Service named `vllm` injects VLLM_PORT."""
    assert template["spec"].get("enableServiceLinks") is False


def vllm_off_tpu(spec: dict[str, Any], container: dict[str, Any]) -> bool:
    """The container's pool runs vLLM on a GPU or CPU (llm-d's tpu-vllm image component sets no USER)."""
    env = container_env(container)
    if "LLMD_POOL" not in env:
        return False
    file = mounted_recipe(spec, container)
    recipe = load_recipe(RecipeSource(env.get("LLMD_RECIPE", ""), str(file) if file else None))
    on_tpu = "google.com/tpu" in container.get("resources", {}).get("limits", {})
    return recipe.pools[env["LLMD_POOL"]].kind == "vllm" and not on_tpu


VLLM = [(n, t) for n, t in POD_TEMPLATES if any(vllm_off_tpu(t["spec"], c) for c in t["spec"]["containers"])]


def test_the_vllm_paths_are_found() -> None:
    paths = {name.split("#")[0] for name, _ in VLLM}
    assert {
        "deploy/kimi-k3.1-pro",
        "deploy/optimized-baseline-cpu-vllm",
        "deploy/wide-ep-deepseek-v4",
    } <= paths


@pytest.mark.parametrize(("name", "template"), VLLM, ids=[n for n, _ in VLLM])
def test_every_vllm_container_sets_user(name: str, template: dict[str, Any]) -> None:
    """vLLM 0.20+ (torch 2.11) fails where the UID has no passwd entry and USER is unset
    (vllm-project/vllm#44548); llm-d's gpu-vllm and cpu-vllm image components add USER=llm-d to every
    Deployment, LWS and DisaggregatedSet role (guides/recipes/modelserver/components/images/gpu-vllm/
    release/kustomization.yaml @927c387c, cpu-vllm/release @d5478e4e)."""
    (container,) = [c for c in template["spec"]["containers"] if vllm_off_tpu(template["spec"], c)]
    assert container_env(container).get("USER") == "llm-d"


HICACHE = "deploy/pd-disaggregation-gpu-sglang-hicache"


def hicache_decode(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dset,) = [d for d in docs if d["kind"] == "DisaggregatedSet"]
    (decode,) = [r for r in dset["spec"]["roles"] if r["name"] == "decode"]
    container: dict[str, Any] = decode["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
        "containers"
    ][0]
    return container


def test_the_sglang_hicache_variant_is_the_guides_component(tmp_path: Path, run_cli: Any) -> None:
    """The guide's decode HiCache component (its three args and 256Gi) as decode's LLMD_EXTRA_ARGS; the
    64Gi of the base would not hold its 128 GiB host pool, which lint says (it counts the extra args)."""
    fixture = yaml.safe_load((ROOT / "tests/fixtures/guides/pd-disaggregation-gpu-sglang.yaml").read_text())
    docs = copy.deepcopy(RENDERED[HICACHE])
    container = hicache_decode(docs)
    assert container_env(container)["LLMD_EXTRA_ARGS"].split() == fixture["hicache_decode_args"]
    assert (
        container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"] == "256Gi"
    )
    container["resources"]["limits"]["memory"] = container["resources"]["requests"]["memory"] = "64Gi"
    code, lines, _ = lint(run_cli, tmp_path, docs)
    assert code == 1 and len(lines) == 2 and all("memory 64Gi is less than pool decode's" in x for x in lines)


RECIPE_FILES: dict[str, str] = compile_recipes().RECIPE_FILES
SETS = {name: f"deploy/{name}" for name in RECIPE_FILES}
RECIPE_MOUNT = "/etc/llm-d-launcher/recipe.yaml"


def role_templates(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (dset,) = [d for d in docs if d["kind"] == "DisaggregatedSet"]
    return [t for _, t in templates(dset)]


@pytest.mark.parametrize("name", SETS)
def test_the_disaggregated_set_mounts_its_recipe_from_a_generated_config_map(name: str) -> None:
    """Not the image's built-in copy: a recipe edit is a ConfigMap edit whose hash rolls the roles,
    which kustomize writes into the roles' volumes only where configurations: tells it the kind."""
    docs = RENDERED[SETS[name]]
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and HASHED.match(d["metadata"]["name"])]
    assert config_map["data"] == {"recipe.yaml": builtin_recipe_text(name)}
    for template in role_templates(docs):
        (container,) = template["spec"]["containers"]
        assert container_env(container)["LLMD_RECIPE_FILE"] == RECIPE_MOUNT
        assert mounted_recipe(template["spec"], container) == ROOT / RECIPE_FILES[name]
        (volume,) = [v for v in template["spec"]["volumes"] if "configMap" in v]
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]


@pytest.mark.parametrize("name", SETS)
def test_a_kustomizations_labels_reach_the_role_templates(name: str) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT / "deploy") as directory:
        here = Path(directory)
        (here / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(ROOT / SETS[name], here)],
            "labels": [{"pairs": {"team": "inference"}, "includeTemplates": True}],
        }))  # fmt: skip
        docs = [d for d in yaml.safe_load_all(kustomize(here)) if d]
    assert all(t["metadata"]["labels"]["team"] == "inference" for t in role_templates(docs))
