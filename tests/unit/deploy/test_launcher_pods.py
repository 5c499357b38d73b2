"""What every launcher pod of deploy/ carries, in every rendering (base, TPU, overlay, each combination of
components, the DisaggregatedSet's roles): no Service env (`enableServiceLinks: false`: a Service named
`vllm` would inject VLLM_PORT=tcp://..., which vLLM refuses); the launcher's ServiceAccount, whose only
permission is creating Events, its token mounted on LWS pods only; LWS_NAME from the pod's LWS label on
LWS pods (the object the launcher's Event names) and never on the others; and how to deploy into another
namespace (a kustomization of your own: `kubectl apply -n other -k` is refused by kubectl)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.test_manifests import BASE, COMPONENTS, DOCS, OVERLAY, ROOT, TPU, kustomize

ACCOUNT = "llm-d-launcher"
LWS_LABEL = "metadata.labels['leaderworkerset.sigs.k8s.io/name']"
EVENTS_ONLY = [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]


def templates(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, pod template) of every pod template an object holds: an LWS's (or a DisaggregatedSet
    role's) leader and worker templates, a Deployment's or DaemonSet's one."""
    if doc["kind"] in ("Deployment", "DaemonSet"):
        return [("template", doc["spec"]["template"])]
    if doc["kind"] == "LeaderWorkerSet":
        lwts = [("", doc["spec"]["leaderWorkerTemplate"])]
    elif doc["kind"] == "DisaggregatedSet":
        lwts = [(f"{r['name']}.", r["spec"]["leaderWorkerTemplate"]) for r in doc["spec"]["roles"]]
    else:
        return []
    return [
        (f"{role}{key}", lwt[key])
        for role, lwt in lwts
        for key in ("workerTemplate", "leaderTemplate")
        if key in lwt
    ]


POD_TEMPLATES = [(f"{name}:{where}", doc["kind"], t) for name, doc in DOCS for where, t in templates(doc)]
IDS = [name for name, _, _ in POD_TEMPLATES]


def test_every_kind_of_pod_is_covered() -> None:
    kinds = {kind for _, kind, _ in POD_TEMPLATES}
    assert kinds == {"LeaderWorkerSet", "DisaggregatedSet", "Deployment", "DaemonSet"}


@pytest.mark.parametrize(("name", "kind", "template"), POD_TEMPLATES, ids=IDS)
def test_no_pod_gets_service_env(name: str, kind: str, template: dict[str, Any]) -> None:
    """Kubernetes injects <SERVICE>_PORT=tcp://IP:PORT for every Service of the namespace unless told
    not to; a Service named `vllm` (or `sglang`) makes that a variable the engine reads."""
    assert template["spec"].get("enableServiceLinks") is False


@pytest.mark.parametrize(("name", "kind", "template"), POD_TEMPLATES, ids=IDS)
def test_every_pod_runs_as_the_launcher_account_lws_pods_with_its_token(
    name: str, kind: str, template: dict[str, Any]
) -> None:
    spec = template["spec"]
    assert spec["serviceAccountName"] == ACCOUNT
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env.keys()
    if kind in ("LeaderWorkerSet", "DisaggregatedSet"):
        assert spec["automountServiceAccountToken"] is True
        assert env["LWS_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": LWS_LABEL}}
    else:  # the Mooncake master and the donors belong to no LWS: nothing to name, no token to hold
        assert spec["automountServiceAccountToken"] is False
        assert "LWS_NAME" not in env


def renderings() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, doc in DOCS:
        out.setdefault(name.split("#")[0], []).append(doc)
    return out


@pytest.mark.parametrize(("source", "docs"), renderings().items(), ids=list(renderings()))
def test_the_account_may_create_events_and_nothing_else(source: str, docs: list[dict[str, Any]]) -> None:
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    if not any(templates(d) for d in docs):
        return
    account = objects[("ServiceAccount", ACCOUNT)]
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert [r["kind"] for r in roles] == ["Role"] and [b["kind"] for b in bindings] == ["RoleBinding"]
    (role,), (binding,) = roles, bindings
    assert role["rules"] == EVENTS_ONLY
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    namespace = account["metadata"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace


def own_kustomization(namespace: str, resources: list[Path], components: tuple[str, ...] = ()) -> str:
    """deploy/README.md's way into another namespace: a kustomization of your own naming it."""
    with tempfile.TemporaryDirectory(dir=ROOT / "deploy") as directory:
        here = Path(directory)
        (here / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
            "resources": [os.path.relpath(r, here) for r in resources],
            "components": [os.path.relpath(COMPONENTS / c, here) for c in components],
        }))  # fmt: skip
        return kustomize(here)


@pytest.mark.parametrize(
    ("resources", "components"),
    [([BASE], ()), ([TPU], ()), ([OVERLAY], ("mooncake-donors", "monitoring", "disaggregated-set"))],
    ids=["base", "tpu", "overlay+donors+monitoring+disaggregated-set"],
)
def test_another_namespace_reaches_every_object_and_binding(
    resources: list[Path], components: tuple[str, ...]
) -> None:
    docs = [d for d in yaml.safe_load_all(own_kustomization("other", resources, components)) if d]
    assert docs and all(d["metadata"]["namespace"] == "other" for d in docs)
    subjects = [s for d in docs if d["kind"] == "RoleBinding" for s in d["subjects"]]
    assert subjects and all(s["namespace"] == "other" for s in subjects)


def test_the_readme_says_how_to_change_the_namespace() -> None:
    """Every rendered object names its namespace (the kustomizations set it), which kubectl refuses to
    override with `-n`: the README must not promise `kubectl apply -n other -k`, and shows the way
    the test above renders."""
    assert all(d["metadata"].get("namespace") for _, d in DOCS)
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("\n## Namespace\n", 1)[1].split("\n## ", 1)[0]
    assert "namespace: other" in section and "resources:" in section
    assert not re.search(r"`kubectl apply -n \S+ -k`[^.]*works", readme)
