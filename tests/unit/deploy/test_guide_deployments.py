"""deploy/<recipe>/ for the llm-d well-lit paths in a Deployment's form (the guides' own form for
optimized-baseline): each renders (`kubectl kustomize`), is valid Kubernetes 1.33 (strict), runs the
launcher (the image's entrypoint) on the built-in recipe it is named after, probes the launcher's
endpoints with the guide's timings, carries the guide's grace period, replicas, Secret env, shm and
resources (tests/fixtures/guides/), and its pod plans without error with the container's env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from launcher.config.defaults import PROBE_PORT
from launcher.config.recipe import parse_size
from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, load_recipe
from launcher.config.settings import Settings
from tests.unit.deploy.test_manifests import K8S_VERSION, container_env, kustomize

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "guides"
DIRS = sorted(
    d
    for d in (ROOT / "deploy").iterdir()
    if d.name in builtin_recipe_names() and (d / "kustomization.yaml").exists()
)
GUIDED = [d for d in DIRS if (FIXTURES / f"{d.name}.yaml").exists()]


def deployments(directory: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(kustomize(directory)) if d and d["kind"] == "Deployment"]


def test_every_guide_recipe_with_a_deployment_form_has_one() -> None:
    """A recipe whose guide runs its pods as Deployments ships a deploy/ directory of its name."""
    for fixture in FIXTURES.glob("*.yaml"):
        data = yaml.safe_load(fixture.read_text())
        if any(pod["kind"] == "Deployment" for pod in data["pods"].values()):
            assert (ROOT / "deploy" / data["recipe"] / "kustomization.yaml").exists(), data["recipe"]
    assert GUIDED


@pytest.mark.parametrize("directory", GUIDED, ids=[d.name for d in GUIDED])
def test_the_deployment_is_the_guides_pod_run_by_the_launcher(directory: Path, run_cli: Any) -> None:
    recipe = load_recipe(RecipeSource(directory.name, None))
    guide = yaml.safe_load((FIXTURES / f"{directory.name}.yaml").read_text())
    docs = deployments(directory)
    assert len(docs) == len([p for p in guide["pods"].values() if p["kind"] == "Deployment"])
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        spec = doc["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        env = container_env(container)
        assert env["LLMD_RECIPE"] == directory.name
        (pod,) = [p for p in guide["pods"].values() if p["pool"] == env["LLMD_POOL"]]
        pool = recipe.pools[pod["pool"]]
        assert "command" not in container and "args" not in container  # the image's `llm-d-launcher run`
        assert doc["spec"]["replicas"] == getattr(pool, "replicas", 1) == pod["replicas"]
        # The guide's grace period, and the launcher told it (its drain and deadlines follow from it).
        assert spec["terminationGracePeriodSeconds"] == pod["termination_grace_seconds"]
        grace = recipe.launcher.get("grace_seconds", Settings.model_fields["grace_seconds"].default)
        assert int(env["LLMD_GRACE_SECONDS"]) == pod["termination_grace_seconds"] == grace
        assert "lifecycle" not in container  # the launcher deregisters itself: no preStop sleep
        probes = {name: container[f"{name}Probe"]["httpGet"] for name in ("startup", "liveness", "readiness")}
        assert {n: p["path"] for n, p in probes.items()} == {
            "startup": "/startupz", "liveness": "/livez", "readiness": "/readyz"
        }  # fmt: skip
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert {ports[p["port"]] for p in probes.values()} == {PROBE_PORT}
        startup = container["startupProbe"]
        budget = (
            startup.get("initialDelaySeconds", 0) + startup["periodSeconds"] * startup["failureThreshold"]
        )
        assert int(env["LLMD_STARTUP_SECONDS"]) == budget - 2 * startup["periodSeconds"]
        secrets = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in container["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert secrets == pod.get("env_from_secret", {})
        shm = [v["emptyDir"]["sizeLimit"] for v in spec["volumes"] if v["name"] == "shm"]
        guide_shm = [parse_size(pod["shm"])] if "shm" in pod else []
        assert [parse_size(s) for s in shm] == guide_shm == ([pool.host.shm] if pool.host.shm else [])
        assert spec.get("nodeSelector") == pod.get("node_selector")
        assert container["resources"] == pod["resources"]
        assert container.get("securityContext", {}).get("capabilities", {}).get("add") == pod.get(
            "capabilities"
        )
        # The pod plans, and its group checks pass, with exactly this env (downward-API values filled in).
        code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
        assert code == 0 and '"ok": true' in out, err
        code, out, err = run_cli("plan", "--format", "json", env=env)
        assert code == 0, err
        (engine,) = [p for p in json.loads(out)["processes"] if p["name"] == "engine"]
        assert engine["argv"][: len(pod["command"])] == pod["command"]
