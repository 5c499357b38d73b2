"""deploy/: the kustomize base and the GKE A4X-Max overlay, each with every combination of the optional
components, render (`kubectl kustomize`), and every object is valid for its schema (LeaderWorkerSet:
the LWS CRD; ComputeDomain: the NVIDIA DRA driver's CRD; PodMonitor, PrometheusRule: prometheus-
operator's CRDs; the rest, ResourceClaimTemplate included: Kubernetes 1.33, strict). Every pod runs
the launcher with env only, probes the launcher's endpoints with timings fit for a long load (the
guide's 7200 s), plans without error, carries the serving label exactly when it serves, and holds
the memory roles/memory.py computes; every name the guide's commands use exists."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from launcher.config.defaults import PROBE_PORT
from launcher.config.recipe import MooncakeDonorPool, SglangPool, VllmPool, parse_size
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from roles.manifest import worker_templates
from roles.memory import pod_memory
from tests.manifests import container_env, lws_env

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
CRD = FIXTURES / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
COMPUTE_DOMAIN_CRD = FIXTURES / "resource.nvidia.com_computedomains.yaml"
POD_MONITOR_CRD = FIXTURES / "monitoring.coreos.com_podmonitors.yaml"
PROMETHEUS_RULE_CRD = FIXTURES / "monitoring.coreos.com_prometheusrules.yaml"
DISAGGREGATED_SET_CRD = FIXTURES / "disaggregatedset.x-k8s.io_disaggregatedsets.yaml"
COMPONENTS = ROOT / "deploy" / "components"
NAMESPACE = "llm-d-kimi-k3-1"  # the guide's
GUIDE = FIXTURES / "kimi-k3.1-pro-guide.md"
BASE = ROOT / "deploy" / "kimi-k3.1-pro"
TPU = BASE / "tpu"  # the TPU pool's own kustomization (the guide's modelserver/tpu/sglang/)
OVERLAY = ROOT / "deploy" / "overlays" / "gke-a4x-max"
K8S_VERSION = "1.33"
# DRA objects (ResourceClaimTemplate) as resource.k8s.io/v1, GA in 1.34: GKE A4X Max needs 1.34.3 or later
# (NVIDIA AICR docs/integrator/gke-a4x-max-networking.md, after GKE's A4X Max guide).
DRA_K8S_VERSION = "1.34"


def kustomize(directory: Path) -> str:
    """What `kubectl apply -k` would send (Debian: kubernetes-client; tests/install.sh installs it)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render deploy/ (apt-get install kubernetes-client)"
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def with_components(base: Path, components: tuple[str, ...]) -> str:
    """A kustomization of the user's own: the base (or overlay) plus some components, in a directory
    beside them (kustomize loads bases and components by relative path)."""
    with tempfile.TemporaryDirectory(dir=ROOT / "deploy") as directory:
        here = Path(directory)
        (here / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": NAMESPACE,
            "resources": [os.path.relpath(base, here)],
            "components": [os.path.relpath(COMPONENTS / c, here) for c in components],
        }))  # fmt: skip
        return kustomize(here)


LAST = "disaggregated-set"  # it moves the LeaderWorkerSets into a DisaggregatedSet: after their patches


def optional_components(base: Path) -> list[str]:
    """Every component the base does not already include, in the order a kustomization lists them."""
    included = yaml.safe_load((base / "kustomization.yaml").read_text()).get("components", [])
    names = [c.name for c in COMPONENTS.iterdir() if not any(i.endswith(c.name) for i in included)]
    return sorted(names, key=lambda name: (name == LAST, name))


def combinations() -> list[tuple[Path, tuple[str, ...]]]:
    """The base and the overlay, each with every subset of the optional components (the overlay
    last: where it changes a workload, its version is the one the tests below read)."""
    return [(base, subset) for base in (BASE, OVERLAY) for n in range(len(optional_components(base)) + 1)
            for subset in itertools.combinations(optional_components(base), n)]  # fmt: skip


def documents() -> list[tuple[str, dict[str, Any]]]:
    sources = [(f"{d.relative_to(ROOT)} (kustomize)", kustomize(d)) for d in (BASE, TPU, OVERLAY)]
    sources += [(f"{base.relative_to(ROOT)} + {'+'.join(c)} (kustomize)", with_components(base, c))
                for base, c in combinations() if c]  # fmt: skip
    return [
        (f"{source}#{doc['kind']}/{doc['metadata']['name']}", doc)
        for source, text in sources
        for doc in yaml.safe_load_all(text)
        if doc
    ]


DOCS = documents()
POD_KINDS = ("LeaderWorkerSet", "Deployment", "DaemonSet")
# Each workload once: the overlay's version (with its claims) where it changes the base's.
WORKLOADS = list(
    {
        (doc["kind"], doc["metadata"]["name"]): (name, doc) for name, doc in DOCS if doc["kind"] in POD_KINDS
    }.values()
)


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


@functools.cache
def crd_validator(path: Path, version: str) -> jsonschema.protocols.Validator:
    crd = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(strict(schema))


def disaggregated_set_rules(doc: dict[str, Any]) -> list[str]:
    """What the API server checks of a DisaggregatedSet beyond its OpenAPI schema: the CRD's CEL rule
    (replicas zero for every static role or for none) and `name` as the roles' list-map key."""
    roles = doc.get("spec", {}).get("roles", [])
    static = [r for r in roles if r.get("scaling", {}).get("mode", "Static") != "External"]
    replicas = [r.get("spec", {}).get("replicas", 0) for r in static]
    errors = []
    if not (all(n == 0 for n in replicas) or all(n > 0 for n in replicas)):
        errors.append("replicas must be zero for all non-External roles or non-zero for all")
    names = [r.get("name") for r in roles]
    if len(names) != len(set(names)):
        errors.append(f"duplicate role names {names}")
    return errors


def validate(doc: dict[str, Any]) -> list[str]:
    validator = None
    extra: list[str] = []
    if doc["kind"] == "LeaderWorkerSet":
        assert doc["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
        validator = lws_validator()
    elif doc["kind"] == "ComputeDomain":
        assert doc["apiVersion"] == "resource.nvidia.com/v1beta1"
        validator = crd_validator(COMPUTE_DOMAIN_CRD, "v1beta1")
    elif doc["kind"] == "DisaggregatedSet":
        assert doc["apiVersion"] == "disaggregatedset.x-k8s.io/v1"
        validator = crd_validator(DISAGGREGATED_SET_CRD, "v1")
        extra = disaggregated_set_rules(doc)
    elif doc["kind"] in ("PodMonitor", "PrometheusRule"):
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        validator = crd_validator(
            POD_MONITOR_CRD if doc["kind"] == "PodMonitor" else PROMETHEUS_RULE_CRD, "v1"
        )
    if validator is not None:
        return [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
        ] + extra
    try:
        version = DRA_K8S_VERSION if doc["apiVersion"].startswith("resource.k8s.io/") else K8S_VERSION
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [str(exc.message)]
    return []


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "LeaderWorkerSet":
        spec: dict[str, Any] = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        return spec
    template: dict[str, Any] = doc["spec"]["template"]["spec"]
    return template


def pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod template of each pod of one group, by worker index (roles/manifest.py)."""
    return [dict(t) for t in worker_templates(doc)]


HASHED = re.compile(r"^(?P<name>.+)-[a-z0-9]{10}$")  # a generated ConfigMap's name once rendered


def shipped_yaml(only: str = "") -> list[Path]:
    """deploy/'s YAML files (named `only` if given), without the temporary copies other tests make in
    deploy/ at the same time (tempfile's `tmp` prefix; a glob through one that vanishes raises)."""
    found = []
    for directory, subdirectories, files in os.walk(ROOT / "deploy"):
        subdirectories[:] = [name for name in subdirectories if not name.startswith("tmp")]
        found += [Path(directory) / f for f in files if f.endswith(".yaml") and f == (only or f)]
    return found


def recipe_generators() -> dict[str, tuple[str, Path]]:
    """ConfigMap name -> (its key, the repository file) of each recipe configMapGenerator of deploy/
    (the dashboard's is JSON)."""
    generators = {}
    for path in shipped_yaml("kustomization.yaml"):
        for generator in yaml.safe_load(path.read_text()).get("configMapGenerator", []):
            (file,) = generator["files"]
            key, _, source = file.rpartition("=") if "=" in file else (file, "", file)
            if source.endswith(".yaml"):
                generators[generator["name"]] = (key, path.parent / source)
    return generators


def mounted_recipe(spec: dict[str, Any], container: dict[str, Any]) -> Path | None:
    """The repository file behind the recipe the pod reads at LLMD_RECIPE_FILE: the ConfigMap volume
    mounted at its directory, made by a configMapGenerator of deploy/. None: a built-in recipe."""
    path = container_env(container).get("LLMD_RECIPE_FILE")
    if path is None:
        return None
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == os.path.dirname(path)]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    name = volume["configMap"]["name"]
    generated = HASHED.match(name)
    key, source = recipe_generators()[generated["name"] if generated else name]
    assert key == os.path.basename(path), (key, path)
    return source


def pod_env(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """container_env, with the mounted recipe mapped back to its file in the repository."""
    recipe = mounted_recipe(spec, container)
    return container_env(container) | ({"LLMD_RECIPE_FILE": str(recipe)} if recipe else {})


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
    kinds = {doc["kind"] for _, doc in DOCS}
    assert {"ComputeDomain", "ResourceClaimTemplate", "Service"} <= kinds


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
    domain = copy.deepcopy(next(doc for _, doc in DOCS if doc["kind"] == "ComputeDomain"))
    domain["spec"]["numNodes"] = "ten"
    assert any("'ten' is not of type 'integer'" in e for e in validate(domain))
    claim = copy.deepcopy(next(doc for _, doc in DOCS if doc["kind"] == "ResourceClaimTemplate"))
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["countt"] = 8
    assert validate(claim)
    beta_shape = copy.deepcopy(next(doc for _, doc in DOCS if doc["kind"] == "ResourceClaimTemplate"))
    beta_shape["spec"]["spec"]["devices"]["requests"][0] |= beta_shape["spec"]["spec"]["devices"]["requests"][
        0
    ].pop("exactly")
    assert validate(beta_shape)  # v1beta1's request shape is not v1's


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_every_pod_plans_without_error(name: str, doc: dict[str, Any], run_cli: Any) -> None:
    container = pod_spec(doc)["containers"][0]
    env = pod_env(pod_spec(doc), container)
    if doc["kind"] == "LeaderWorkerSet":
        size = doc["spec"]["leaderWorkerTemplate"]["size"]
        namespace = doc["metadata"]["namespace"]
        leader = f"{doc['metadata']['name']}-0.{doc['metadata']['name']}.{namespace}"
        env |= lws_env(leader, size)
        code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
        assert code == 0, err
        assert '"ok": true' in out and out.count('"schema": "llm-d-launcher/plan/v2"') == size
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
    # In an LWS group time parked (this pod or a peer) does not count against the deadline, but the
    # kubelet counts from the container's start: its budget holds LLMD_PARK_SECONDS as well.
    parking = float(container_env(container)["LLMD_PARK_SECONDS"]) if doc["kind"] == "LeaderWorkerSet" else 0
    startup = container["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert deadline > 0 and budget == deadline + parking + 2 * startup["periodSeconds"]


@pytest.mark.parametrize(
    ("file", "pool"), [("prefill.yaml", "prefill"), ("decode.yaml", "decode"), ("tpu/tpu.yaml", "tpu")]
)
def test_groups_match_the_recipe(file: str, pool: str, run_cli: Any) -> None:
    """replicas and size come from the recipe; the leader pod's container declares every port it uses."""
    doc = yaml.safe_load((BASE / file).read_text())
    recipe_pool = load_recipe(RecipeSource("kimi-k3.1-pro", None)).pools[pool]
    assert isinstance(recipe_pool, (VllmPool, SglangPool))
    assert doc["spec"]["replicas"] == recipe_pool.replicas
    assert doc["spec"]["leaderWorkerTemplate"]["size"] == recipe_pool.nodes
    assert doc["spec"]["startupPolicy"] == "LeaderCreated"
    assert doc["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    container = pod_spec(doc)["containers"][0]
    env = pod_env(pod_spec(doc), container) | lws_env("10.64.0.1", recipe_pool.nodes)
    code, out, err = run_cli("plan", "--format", "json", env=env)
    assert code == 0, err
    plan = json.loads(out)
    planned = {port["port"] for p in plan["processes"] for port in p["ports"]} | {plan["probes"]["port"]}
    declared = {p["containerPort"] for p in container["ports"]}
    # Data-parallel pods also listen on NIXL side channels per global rank, which differ per pod.
    assert {p for p in planned if not 5600 <= p < 5616} <= declared


API_PORT = re.compile(r"^(http|sidecar)")  # an engine's API port, or the sidecar in front of it


@pytest.mark.parametrize(
    ("name", "doc"),
    [(n, d) for n, d in WORKLOADS if d["kind"] == "LeaderWorkerSet"],
    ids=[n for n, d in WORKLOADS if d["kind"] == "LeaderWorkerSet"],
)
def test_only_pods_that_serve_carry_the_serving_label(name: str, doc: dict[str, Any], run_cli: Any) -> None:
    """The router's InferencePool selects llm-d.ai/inference-serving: a headless worker selected would
    get requests it cannot answer. Each pod's plan says whether it has an API port."""
    templates = pod_templates(doc)
    env = pod_env(pod_spec(doc), pod_spec(doc)["containers"][0]) | lws_env("10.64.0.1", len(templates))
    code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
    assert code == 0, err
    plans = json.loads(out)["pods"]
    assert len(plans) == len(templates)
    for index, (plan, template) in enumerate(zip(plans, templates, strict=True)):
        serves = any(API_PORT.match(port["name"]) for p in plan["processes"] for port in p["ports"])
        labelled = template["metadata"]["labels"].get("llm-d.ai/inference-serving") == "true"
        assert labelled == serves, f"pod {index}: serves={serves} but serving label={labelled}"


def guide_names() -> set[tuple[str, str]]:
    """(kind, name) of what the guide's commands name, for each accelerator / model server pair it
    supports ("set ACCELERATOR_TYPE=tpu and MODEL_SERVER=sglang for the TPU 7x recipe")."""
    text = GUIDE.read_text().replace("\\\n", " ")
    names = set()
    for accelerator, server in (("gpu", "vllm"), ("tpu", "sglang")):
        line = text.replace("${ACCELERATOR_TYPE}", accelerator).replace("${MODEL_SERVER}", server)
        names |= {
            ("LeaderWorkerSet", n) for n in re.findall(r"^kubectl wait .*leaderworkerset/(\S+)", line, re.M)
        }
    names |= {("Secret", n) for n in re.findall(r"^kubectl create secret generic (\S+)", text, re.M)}
    names |= {("PersistentVolumeClaim", n) for n in re.findall(r"^kubectl delete pvc (\S+)", text, re.M)}
    names |= {("ComputeDomain", n) for n in re.findall(r"(kimi-k3-1-compute-domain)\b", text)}
    names |= {("ResourceClaimTemplate", n) for n in re.findall(r"ResourceClaimTemplate \((\S+)\)", text)}
    return names


def deployed_names() -> set[tuple[str, str]]:
    """What deploy/ creates, and the Secret and PVC (created by the guide's own steps) its pods use."""
    names = {(doc["kind"], doc["metadata"]["name"]) for _, doc in DOCS}
    for _, doc in WORKLOADS:
        for template in pod_templates(doc):
            spec = template["spec"]
            names |= {("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
                      for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}  # fmt: skip
            names |= {("Secret", e["valueFrom"]["secretKeyRef"]["name"]) for c in spec["containers"]
                      for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}  # fmt: skip
    return names


def test_every_name_the_guides_commands_use_exists() -> None:
    wanted = guide_names()
    assert {
        ("LeaderWorkerSet", "kimi-k3-1-gpu-vllm-decode"), ("LeaderWorkerSet", "kimi-k3-1-tpu-sglang-decode"),
        ("Secret", "llm-d-hf-token"), ("PersistentVolumeClaim", "kimi-k3-1-models"),
        ("ComputeDomain", "kimi-k3-1-compute-domain"),
        ("ResourceClaimTemplate", "kimi-k3-1-gpu-vllm-rdma-nic"),
    } <= wanted  # the extraction finds them (a control on the regexes)  # fmt: skip
    assert wanted - deployed_names() == set()


def test_the_overlay_claims_the_compute_domain_and_nics_on_every_gpu_pod() -> None:
    overlay = {(d["kind"], d["metadata"]["name"]): d for n, d in DOCS if n.startswith("deploy/overlays")}
    domain = overlay[("ComputeDomain", "kimi-k3-1-compute-domain")]
    assert domain["spec"]["numNodes"] == 10
    channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    nics = overlay[("ResourceClaimTemplate", "kimi-k3-1-gpu-vllm-rdma-nic")]["spec"]["spec"]["devices"][
        "requests"
    ]
    assert [(r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in nics] == [
        ("mrdma.google.com", 8)
    ]
    for pool in ("prefill", "decode"):
        for template in pod_templates(overlay[("LeaderWorkerSet", f"kimi-k3-1-gpu-vllm-{pool}")]):
            spec = template["spec"]
            claims = {c["name"]: c["resourceClaimTemplateName"] for c in spec["resourceClaims"]}
            assert claims == {"compute-domain": channel, "rdma-nics": "kimi-k3-1-gpu-vllm-rdma-nic"}
            assert spec["containers"][0]["resources"]["claims"] == [{"name": n} for n in claims]


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_memory_holds_the_store_and_the_engine(name: str, doc: dict[str, Any]) -> None:
    """Limits and requests hold what roles/memory.py computes from the recipe; /dev/shm is the
    recipe's; whatever registers Mooncake memory for RDMA may lock it (IPC_LOCK)."""
    recipe = load_recipe(RecipeSource("kimi-k3.1-pro", None))
    for template in pod_templates(doc):
        spec = template["spec"]
        (container,) = spec["containers"]
        pool = recipe.pools[container_env(container)["LLMD_POOL"]]
        need = pod_memory(pool)
        resources = container["resources"]
        assert parse_size(resources["limits"]["memory"]) >= need.total
        assert parse_size(resources["requests"]["memory"]) >= need.total
        shm = [v["emptyDir"]["sizeLimit"] for v in spec.get("volumes", []) if v["name"] == "shm"]
        assert [parse_size(s) for s in shm] == ([need.shm] if need.shm else [])
        if need.segments:
            assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
    assert isinstance(pool, (VllmPool, SglangPool, MooncakeDonorPool)) or need.segments == 0


def test_the_namespace_and_images_are_the_kustomizations() -> None:
    """No object names its namespace (a kustomization of your own sets another: test_launcher_pods.py);
    the kustomizations set it and pin the images."""
    for path in shipped_yaml():
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)):
            if doc.get("kind") not in ("Kustomization", "Component"):
                assert "namespace" not in doc.get("metadata", {}), path
    images = set()
    for directory in (BASE, TPU, OVERLAY):
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert kustomization["namespace"] == NAMESPACE
        images |= {i["name"] for i in kustomization.get("images", [])}
    used = {c["image"].split(":")[0] for _, doc in WORKLOADS for t in pod_templates(doc)
            for c in t["spec"]["containers"]}  # fmt: skip
    assert used <= images


def test_every_combination_of_components_renders() -> None:
    rendered = {name.split("#")[0] for name, _ in DOCS}
    # base: disaggregated-set, donors, gke-mnnvl, monitoring; overlay: disaggregated-set, donors, monitoring
    assert len(combinations()) == 2**4 + 2**3
    assert len(rendered) == len(combinations()) + 1  # + tpu/


def test_tpu_groups_are_pinned_to_one_slice_each() -> None:
    tpu = yaml.safe_load((TPU / "tpu.yaml").read_text())
    assert tpu["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )


@pytest.mark.parametrize(
    ("name", "doc"),
    [(n, d) for n, d in WORKLOADS if d["kind"] == "LeaderWorkerSet"],
    ids=[n for n, d in WORKLOADS if d["kind"] == "LeaderWorkerSet"],
)
def test_engine_pods_request_cpu_and_disk_and_keep_their_compile_caches(
    name: str, doc: dict[str, Any]
) -> None:
    for template in pod_templates(doc):
        spec = template["spec"]
        (container,) = spec["containers"]
        assert {"cpu", "ephemeral-storage"} <= set(container["resources"]["requests"])
        (cache,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "compile-cache"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "compile-cache"]
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"  # survives the group's recreation
        dirs = {k: v for k, v in container_env(container).items() if k.endswith(("_CACHE_ROOT", "_CACHE_PATH",
                "_CACHE_DIR", "_WORKSPACE_BASE"))}  # fmt: skip
        assert dirs and all(v.startswith(cache + "/") or v == cache for v in dirs.values()), dirs


def test_the_router_and_the_pod_monitor_select_the_right_pods() -> None:
    """The router selects llm-d.ai/inference-serving + llm-d.ai/guide (+ model), as llm-d's sister
    guides' values do: only serving pods carry the guide label. The PodMonitor selects every pod."""
    monitor = next(d for _, d in DOCS if d["kind"] == "PodMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    for _, doc in WORKLOADS:
        for template in pod_templates(doc):
            labels = template["metadata"]["labels"]
            assert wanted.items() <= labels.items(), doc["metadata"]["name"]
            serving = labels.get("llm-d.ai/inference-serving") == "true"
            assert (labels.get("llm-d.ai/guide") == "kimi-k3-1") == serving


# What GKE's and NVIDIA's A4X Max docs require of a pod's placement (NVIDIA AICR
# docs/integrator/gke-a4x-max-networking.md, after GKE's "Create an AI-optimized GKE cluster that uses A4X
# Max"): the accelerator network profile's label, arm64 (Grace); and GKE's GPU-type label.
A4X_MAX_NODES = {"gke.networks.io/accelerator-network-profile": "auto", "kubernetes.io/arch": "arm64",
                 "cloud.google.com/gke-accelerator": "nvidia-gb300"}  # fmt: skip


def test_the_overlay_puts_every_gpu_pod_on_the_a4x_max_pool_and_claims_whole_nodes() -> None:
    """Every prefill and decode pod of the overlay selects the pool's labels, and takes the whole node:
    4 GPUs and all 8 RDMA NICs (RDMA cannot be shared between pods of one A4X Max node)."""
    for name, doc in DOCS:
        if not name.startswith(str(OVERLAY.relative_to(ROOT))) or doc["kind"] != "LeaderWorkerSet":
            continue
        for template in pod_templates(doc):
            spec = template["spec"]
            assert spec["nodeSelector"] == A4X_MAX_NODES, name
            assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_the_mnnvl_component_gives_every_gpu_pod_host_ipc_pid_and_the_env() -> None:
    overlay = {(d["kind"], d["metadata"]["name"]): d for n, d in DOCS if n.startswith("deploy/overlays")}
    for pool in ("prefill", "decode"):
        for template in pod_templates(overlay[("LeaderWorkerSet", f"kimi-k3-1-gpu-vllm-{pool}")]):
            spec = template["spec"]
            assert spec["hostIPC"] is True and spec["hostPID"] is True
            env = container_env(spec["containers"][0])
            assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NVSHMEM_CUMEM_HANDLE_TYPE"] == "FABRIC"
            assert env["UCX_TLS"].startswith("cuda_ipc")


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_every_pod_reads_the_recipe_from_a_generated_config_map(name: str, doc: dict[str, Any]) -> None:
    """LLMD_RECIPE_FILE is a mounted ConfigMap of the same rendering whose name carries the content
    hash, holding its configMapGenerator's file: a recipe of the pod's own pool alone."""
    source = name.split("#")[0]
    config_maps = {
        d["metadata"]["name"]: d for n, d in DOCS if n.startswith(source + "#") and d["kind"] == "ConfigMap"
    }
    for template in pod_templates(doc):
        spec = template["spec"]
        (container,) = spec["containers"]
        recipe = mounted_recipe(spec, container)
        assert recipe is not None, "reads a built-in recipe: an edit in deploy/ would never reach it"
        (volume,) = [v for v in spec["volumes"] if "configMap" in v]
        mounted = volume["configMap"]["name"]
        assert HASHED.match(mounted), f"{mounted}: no hash suffix, a recipe change would not roll the pods"
        assert config_maps[mounted]["data"] == {"recipe.yaml": recipe.read_text()}
        pools = yaml.safe_load(recipe.read_text())["pools"]
        assert list(pools) == [container_env(container)["LLMD_POOL"]]


def test_the_readme_lists_what_is_unverified_for_every_part_of_deploy() -> None:
    """deploy/README.md's "Unverified" section: one line per value no real cluster has checked, each
    naming the part of deploy/ it lives in (every Component, the overlay, the base) and why."""
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("\n## Unverified\n", 1)[1].split("\n## ", 1)[0]
    items = [line for line in section.splitlines() if line.startswith("- ")]
    continued = [line for line in section.splitlines() if line.startswith("  ") and line.strip()]
    assert items and not continued, "one line each: a bullet continued on the next line"
    parts = [f"components/{c.name}/" for c in sorted(COMPONENTS.iterdir())]
    parts += [f"{OVERLAY.relative_to(ROOT / 'deploy')}/", f"{BASE.name}/"]
    for part in parts:
        assert any(item.startswith(f"- `{part}") for item in items), f"no unverified line for {part}"
    for item in items:
        assert re.match(r"- `[^`]+`.+: .+", item), f"names no place, or says no why: {item}"


PART_OF = {"app.kubernetes.io/part-of": "kimi-k3-1"}  # the label deploy/README.md's `--prune -l` selects


def test_every_object_carries_the_label_prune_selects() -> None:
    """Issue #40: the recipe ConfigMaps, the master Service and the ComputeDomain carried no labels, so
    `kubectl apply --prune -l app.kubernetes.io/part-of=kimi-k3-1` could not select (nor prune) them.
    Every object of every combination carries it, and no pod selector changed for it."""
    labelled = {
        name for name, doc in DOCS if PART_OF.items() <= (doc["metadata"].get("labels") or {}).items()
    }
    unlabelled = sorted({name.split("#")[1] for name, _ in DOCS if name not in labelled})
    assert unlabelled == []
    for _, doc in WORKLOADS:
        assert "app.kubernetes.io/part-of" not in json.dumps(doc["spec"].get("selector", {}))
