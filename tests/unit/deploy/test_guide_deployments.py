"""deploy/<recipe>/ for the llm-d well-lit paths in the guides' own form: a Deployment
(optimized-baseline) or a DisaggregatedSet of LWS roles (pd-disaggregation, wide-ep). Each renders
(`kubectl kustomize`), is valid (Kubernetes 1.33 strict; the DisaggregatedSet against the vendored
kubernetes-sigs/lws CRD, strict, with its CEL rule), runs the launcher on the built-in recipe it is
named after, probes the launcher's endpoints with the guide's timings, carries the guide's grace
period, replicas, rollout, Secret env, shm and resources (tests/fixtures/guides/), and every pod plans
(`plan --group`) without error with the container's env."""

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
from tests.manifests import container_env
from tests.manifests import lws_env as injected_by_lws
from tests.unit.deploy.test_manifests import K8S_VERSION, kustomize, validate
from tests.unit.deploy.test_manifests import pod_env as repository_env

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "guides"
DIRS = sorted(
    d
    for d in (ROOT / "deploy").iterdir()
    if d.name in builtin_recipe_names() and (d / "kustomization.yaml").exists()
)


def guide(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((FIXTURES / f"{directory.name}.yaml").read_text())
    return data


def guided(kind: str) -> list[Path]:
    """The deploy/ directories whose guide runs its model-server pods as `kind`."""
    return [
        d
        for d in DIRS
        if (FIXTURES / f"{d.name}.yaml").exists()
        and any(pod["kind"] == kind for pod in guide(d)["pods"].values())
    ]


GUIDED = guided("Deployment")
SETS = guided("DisaggregatedSet")


def rendered(directory: Path, kind: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(kustomize(directory)) if d and d["kind"] == kind]


def deployments(directory: Path) -> list[dict[str, Any]]:
    return rendered(directory, "Deployment")


def test_every_guide_recipe_has_a_deploy_directory_in_the_guides_form() -> None:
    """A recipe whose guide runs its pods as Deployments or a DisaggregatedSet ships a deploy/
    directory of its name."""
    for fixture in FIXTURES.glob("*.yaml"):
        data = yaml.safe_load(fixture.read_text())
        if any(pod["kind"] in ("Deployment", "DisaggregatedSet") for pod in data["pods"].values()):
            assert (ROOT / "deploy" / data["recipe"] / "kustomization.yaml").exists(), data["recipe"]
    assert GUIDED and SETS


def check_launcher_pod(
    recipe_name: str,
    spec: dict[str, Any],
    container: dict[str, Any],
    pod: dict[str, Any],
    in_group: bool = False,
) -> None:
    """What every guide pod run by the launcher shares: its recipe and pool, the guide's grace period
    told to the launcher, the launcher's probes on its port with the guide's budget as its start-up
    deadline (less the time an LWS pod may park), the guide's Secret env, shm, node selector,
    resources (memory raised to hold the guide's /dev/shm where it does not) and capabilities."""
    recipe = load_recipe(RecipeSource(recipe_name, None))
    env = container_env(container)
    assert env["LLMD_RECIPE"] == recipe_name
    pool = recipe.pools[pod["pool"]]
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
    for name, timings in pod.get("probes", {}).items():
        assert {k: v for k, v in container[f"{name}Probe"].items() if k != "httpGet"} == timings, name
    startup = container["startupProbe"]
    budget = startup.get("initialDelaySeconds", 0) + startup["periodSeconds"] * startup["failureThreshold"]
    park = Settings.model_fields["park_seconds"].default if in_group else 0
    assert int(env["LLMD_STARTUP_SECONDS"]) == budget - park - 2 * startup["periodSeconds"]
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert secrets == pod.get("env_from_secret", {})
    shm = [v["emptyDir"].get("sizeLimit") for v in spec["volumes"] if v["name"] == "shm"]
    shm = [s for s in shm if s is not None]  # a guide may leave its memory-backed shm unbounded
    guide_shm = [parse_size(pod["shm"])] if "shm" in pod else []
    assert [parse_size(s) for s in shm] == guide_shm == ([pool.host.shm] if pool.host.shm else [])
    assert spec.get("nodeSelector") == pod.get("node_selector")
    assert container["resources"] == guide_resources(pod, pool.host.shm)
    assert container.get("securityContext", {}).get("capabilities", {}).get("add") == pod.get("capabilities")


def guide_resources(pod: dict[str, Any], shm: int) -> dict[str, Any]:
    """The guide's resources, with the /dev/shm emptyDir (memory-backed: charged to the pod) added
    to a memory the guide sized below it (`llm-d-launcher lint` finds that)."""
    resources = {k: dict(v) for k, v in pod["resources"].items()}
    for values in resources.values():
        if "memory" in values and parse_size(values["memory"]) < shm:
            values["memory"] = f"{(parse_size(values['memory']) + shm) >> 30}Gi"
    return resources


@pytest.mark.parametrize("directory", GUIDED, ids=[d.name for d in GUIDED])
def test_the_deployment_is_the_guides_pod_run_by_the_launcher(directory: Path, run_cli: Any) -> None:
    recipe = load_recipe(RecipeSource(directory.name, None))
    pods = guide(directory)["pods"]
    # Pods that are no model server (the precise-prefix guide's render pool) run as the guide writes them.
    docs = [
        d
        for d in deployments(directory)
        if "LLMD_RECIPE" in container_env(d["spec"]["template"]["spec"]["containers"][0])
    ]
    assert len(docs) == len([p for p in pods.values() if p["kind"] == "Deployment"])
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        spec = doc["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        env = container_env(container)
        (pod,) = [p for p in pods.values() if p["pool"] == env["LLMD_POOL"]]
        assert "command" not in container and "args" not in container  # the image's `llm-d-launcher run`
        assert doc["spec"]["replicas"] == getattr(recipe.pools[pod["pool"]], "replicas", 1) == pod["replicas"]
        check_launcher_pod(directory.name, spec, container, pod)
        # The pod plans, and its group checks pass, with exactly this env (downward-API values filled in).
        code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
        assert code == 0 and '"ok": true' in out, err
        code, out, err = run_cli("plan", "--format", "json", env=env)
        assert code == 0, err
        (engine,) = [p for p in json.loads(out)["processes"] if p["name"] == "engine"]
        assert engine["argv"][: len(pod["command"])] == pod["command"]


def lws_env(set_name: str, role: str, size: int, worker: int) -> dict[str, str]:
    """What LWS gives a pod of the DisaggregatedSet's child LWS (<set>-<slice>-<revision>-<role>; the
    revision here an example) at one worker index: its name label, leader address, size, index."""
    child = f"{set_name}-0-5d8f7c9b-{role}"
    return {"LWS_NAME": child} | injected_by_lws(f"{child}-0.{child}.llm-d", size, worker)


@pytest.mark.parametrize("directory", SETS, ids=[d.name for d in SETS])
def test_the_disaggregated_set_is_the_guides_roles_run_by_the_launcher(directory: Path, run_cli: Any) -> None:
    recipe = load_recipe(RecipeSource(directory.name, None))
    data = guide(directory)
    pods = [p for p in data["pods"].values() if p["kind"] == "DisaggregatedSet"]
    for doc in rendered(directory, "ServiceAccount") + rendered(directory, "Role"):
        assert validate(doc) == []
    (binding,) = rendered(directory, "RoleBinding")
    assert validate(binding) == [] and binding["subjects"][0]["name"] == "llm-d-launcher"
    (doc,) = rendered(directory, "DisaggregatedSet")
    assert validate(doc) == []  # the vendored CRD, strict, and its CEL rule
    assert doc["spec"].get("slices", 1) == data["slices"]
    assert [r["name"] for r in doc["spec"]["roles"]] == list(dict.fromkeys(p["pool"] for p in pods))
    for role in doc["spec"]["roles"]:
        of_role = [p for p in pods if p["pool"] == role["name"]]
        pod = of_role[0]
        pool = recipe.pools[role["name"]]
        lwt = role["spec"]["leaderWorkerTemplate"]
        assert role["spec"]["replicas"] == getattr(pool, "replicas", 1) == pod["replicas"]
        assert lwt["size"] == pool.nodes == int(pod["lws_env"]["LWS_GROUP_SIZE"])
        assert role["spec"]["rolloutStrategy"] == {
            "type": "RollingUpdate", "rollingUpdateConfiguration": pod["rollout"]
        }  # fmt: skip
        assert "leaderTemplate" not in lwt  # one template: the launcher tells the leader by its index
        template = lwt["workerTemplate"]
        assert template["metadata"]["labels"]["llm-d.ai/role"] == role["name"]
        spec = template["spec"]
        assert spec["enableServiceLinks"] is False
        assert spec["serviceAccountName"] == "llm-d-launcher"
        (container,) = spec["containers"]
        assert "initContainers" not in spec  # the routing sidecar is the launcher's process
        assert container["command"] == ["llm-d-launcher", "run"] and "args" not in container
        env = repository_env(spec, container)  # the mounted recipe: its file in the repository
        assert env["LLMD_POOL"] == role["name"]
        assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]
                if "fieldRef" in e.get("valueFrom", {})} == {
            "POD_IP": "status.podIP", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace",
            "LWS_NAME": "metadata.labels['leaderworkerset.sigs.k8s.io/name']", "NODE_NAME": "spec.nodeName",
        }  # fmt: skip
        assert "probes" in pod and "rollout" in pod
        check_launcher_pod(directory.name, spec, container, pod, in_group=True)
        # Every pod of a group plans, and the group's checks pass, from its own LWS env.
        for worker in range(lwt["size"]):
            pod_env = env | lws_env(doc["metadata"]["name"], role["name"], lwt["size"], worker)
            code, out, err = run_cli("plan", "--group", "--format", "json", env=pod_env)
            assert code == 0 and '"ok": true' in out, err
            assert len(json.loads(out)["pods"]) == lwt["size"]
            code, out, err = run_cli("plan", "--format", "json", env=pod_env)
            assert code == 0, err
            if "shell" not in pod:  # wide-ep's script: the golden test evaluates it per worker
                (engine,) = [p for p in json.loads(out)["processes"] if p["name"] == "engine"]
                assert engine["argv"][: len(pod["command"])] == pod["command"]
