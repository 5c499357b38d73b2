"""deploy/: every manifest is valid for its schema (LeaderWorkerSet: the LWS CRD; the rest: Kubernetes
1.33, strict), runs the launcher with env only, probes the launcher's endpoints with timings fit for a
45-minute load, and every pod of it plans without error."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from launcher.config.defaults import PROBE_PORT
from launcher.config.recipe import RecipeSource, SglangPool, VllmPool, load_recipe
from launcher.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "tests" / "fixtures" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
MANIFESTS = sorted((ROOT / "deploy").rglob("*.yaml"))
K8S_VERSION = "1.33"
# What the downward API and LWS give each pod (the addresses are examples).
DOWNWARD = {"status.podIP": "10.64.0.10", "metadata.name": "pod-0", "metadata.namespace": "llm-d-kimi-k3-1",
            "spec.nodeName": "node-a"}  # fmt: skip


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.relative_to(ROOT)}#{i}", doc)
        for path in MANIFESTS
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc
    ]


DOCS = documents()
WORKLOADS = [(name, doc) for name, doc in DOCS if doc["kind"] != "Service"]


def strict(schema: Any) -> Any:
    """kubectl --validate=strict: a field the schema does not know is an error, not silently pruned."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        known = "properties" in out and "additionalProperties" not in out
        if known and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@functools.cache
def lws_validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def validate(doc: dict[str, Any]) -> list[str]:
    if doc["kind"] == "LeaderWorkerSet":
        assert doc["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
        return [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in lws_validator().iter_errors(doc)
        ]
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [str(exc.message)]
    return []


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "LeaderWorkerSet":
        spec: dict[str, Any] = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        return spec
    template: dict[str, Any] = doc["spec"]["template"]["spec"]
    return template


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The env the container would see: literal values and downward-API fields (no secrets)."""
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = DOWNWARD[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def test_there_is_a_manifest_for_every_pool_of_the_guide() -> None:
    kinds = {
        (doc["kind"], container_env(pod_spec(doc)["containers"][0])["LLMD_POOL"]) for _, doc in WORKLOADS
    }
    assert kinds == {
        ("LeaderWorkerSet", "prefill"),
        ("LeaderWorkerSet", "decode"),
        ("LeaderWorkerSet", "tpu"),
        ("Deployment", "mooncake-master"),
        ("DaemonSet", "mooncake-donor"),
    }


@pytest.mark.parametrize(("name", "doc"), DOCS, ids=[name for name, _ in DOCS])
def test_manifest_is_valid(name: str, doc: dict[str, Any]) -> None:
    assert validate(doc) == []


def test_the_validators_catch_mistakes() -> None:
    """Negative controls: the checks above would fail on a broken manifest."""
    lws = copy.deepcopy(next(doc for _, doc in DOCS if doc["kind"] == "LeaderWorkerSet"))
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["startupProbe"]["httpGet"][
        "pathh"
    ] = "/startupz"
    errors = validate(lws)
    assert any("'two' is not of type 'integer'" in e for e in errors), errors
    assert any("'pathh' was unexpected" in e for e in errors), errors
    deployment = copy.deepcopy(next(doc for _, doc in DOCS if doc["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["terminationMessagePolicy"] = 7
    assert validate(deployment)


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_every_pod_plans_without_error(name: str, doc: dict[str, Any], run_cli: Any) -> None:
    container = pod_spec(doc)["containers"][0]
    env = container_env(container)
    if doc["kind"] == "LeaderWorkerSet":
        size = doc["spec"]["leaderWorkerTemplate"]["size"]
        leader = f"{doc['metadata']['name']}-0.{doc['metadata']['name']}.{doc['metadata']['namespace']}"
        env |= {"LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": "0"}
        code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
        assert code == 0, err
        assert '"ok": true' in out and out.count('"schema": "llm-d-launcher/plan/v1"') == size
    else:
        code, _, err = run_cli("plan", env=env)
        assert code == 0, err


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_env_only_and_probes_fit_a_long_load(name: str, doc: dict[str, Any]) -> None:
    spec = pod_spec(doc)
    (container,) = spec["containers"]
    env = container_env(container)
    assert "command" not in container and "args" not in container  # the image's ENTRYPOINT, env only
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert int(env["LLMD_GRACE_SECONDS"]) == spec["terminationGracePeriodSeconds"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["probes"] == int(env.get("LLMD_PROBE_PORT", PROBE_PORT))
    for probe, path in (
        ("startupProbe", "/startupz"),
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
    ):
        assert container[probe]["httpGet"] == {"path": path, "port": "probes"}
        assert container[probe].get("initialDelaySeconds", 0) == 0
    startup = container["startupProbe"]
    if doc["kind"] == "LeaderWorkerSet":  # engines: 45 minutes of loading before the kubelet gives up
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 45 * 60
    for secret in (e for e in container["env"] if "TOKEN" in e["name"]):
        assert "secretKeyRef" in secret["valueFrom"]


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_the_startup_probe_outlasts_the_launchers_own_deadline(name: str, doc: dict[str, Any]) -> None:
    """The launcher ends a pod whose start-up overran LLMD_STARTUP_SECONDS itself, naming the phase it
    was stuck in; the kubelet's startup probe, which says only "probe failed", must not win the race:
    its budget is the deadline plus two periods (the launcher's stop and termination message)."""
    (container,) = pod_spec(doc)["containers"]
    deadline = float(
        container_env(container).get("LLMD_STARTUP_SECONDS", Settings.model_fields["startup_seconds"].default)
    )
    startup = container["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert deadline > 0 and budget == deadline + 2 * startup["periodSeconds"]


@pytest.mark.parametrize(
    ("file", "pool"), [("prefill.yaml", "prefill"), ("decode.yaml", "decode"), ("tpu.yaml", "tpu")]
)
def test_groups_match_the_recipe(file: str, pool: str, run_cli: Any) -> None:
    """replicas and size come from the recipe; the leader pod's container declares every port it uses."""
    doc = yaml.safe_load((ROOT / "deploy" / "kimi-k3.1-pro" / file).read_text())
    recipe_pool = load_recipe(RecipeSource("kimi-k3.1-pro", None)).pools[pool]
    assert isinstance(recipe_pool, (VllmPool, SglangPool))
    assert doc["spec"]["replicas"] == recipe_pool.replicas
    assert doc["spec"]["leaderWorkerTemplate"]["size"] == recipe_pool.nodes
    assert doc["spec"]["startupPolicy"] == "LeaderCreated"
    assert doc["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    container = pod_spec(doc)["containers"][0]
    env = container_env(container) | {"LWS_GROUP_SIZE": str(recipe_pool.nodes), "LWS_WORKER_INDEX": "0",
                                      "LWS_LEADER_ADDRESS": "10.64.0.1"}  # fmt: skip
    code, out, err = run_cli("plan", "--format", "json", env=env)
    assert code == 0, err
    plan = json.loads(out)
    planned = {port["port"] for p in plan["processes"] for port in p["ports"]} | {plan["probes"]["port"]}
    declared = {p["containerPort"] for p in container["ports"]}
    # Data-parallel pods also listen on NIXL side channels per global rank, which differ per pod.
    assert {p for p in planned if not 5600 <= p < 5616} <= declared
