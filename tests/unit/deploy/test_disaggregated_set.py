"""deploy/components/disaggregated-set: prefill and decode as one DisaggregatedSet. Every rendering
that lists it is valid for the DisaggregatedSet CRD of kubernetes-sigs/lws (test_manifests.py's
validate: strict, plus the CRD's CEL rule and list-map key checked by hand), carries llm-d's rollout
(maxSurge 0, maxUnavailable 1) on both roles, and each role is exactly the LeaderWorkerSet it
replaces: same replicas, startup policy, labels and leaderWorkerTemplate, so every pod plans as before
(the LWS env differs only in the child LWS's name, which the controller derives:
<set>-<slice>-<revision>-<role>)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests import lws_env
from tests.unit.deploy.test_manifests import (
    BASE,
    DISAGGREGATED_SET_CRD,
    DOCS,
    NAMESPACE,
    OVERLAY,
    ROOT,
    pod_env,
    validate,
    with_components,
)

ROLLOUT = {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1}}
ROLES = {"prefill": "kimi-k3-1-gpu-vllm-prefill", "decode": "kimi-k3-1-gpu-vllm-decode"}
CHILD = "kimi-k3-1-gpu-vllm-0-5d8f7c9b-{role}"  # an example of the controller's child LWS name


def sets() -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name, doc in DOCS if doc["kind"] == "DisaggregatedSet"]


def test_the_component_renders_with_the_base_and_the_overlay() -> None:
    rendered = {name.split("#")[0] for name, _ in sets()}
    assert any(name.startswith(str(BASE.relative_to(ROOT))) for name in rendered)
    assert any(name.startswith(str(OVERLAY.relative_to(ROOT))) for name in rendered)
    assert len(rendered) == 2**3 + 2**2  # every combination of the other components, base and overlay
    for name in rendered:  # the LeaderWorkerSets it replaces are gone from that rendering
        kinds = [(d["kind"], d["metadata"]["name"]) for n, d in DOCS if n.startswith(name + "#")]
        assert not {("LeaderWorkerSet", lws) for lws in ROLES.values()} & set(kinds), name


@pytest.mark.parametrize(("name", "doc"), sets(), ids=[name for name, _ in sets()])
def test_the_set_is_valid_for_the_lws_projects_crd(name: str, doc: dict[str, Any]) -> None:
    assert validate(doc) == []
    assert [r["name"] for r in doc["spec"]["roles"]] == list(ROLES)
    assert all(r["spec"]["rolloutStrategy"] == ROLLOUT for r in doc["spec"]["roles"])


def test_the_validation_catches_mistakes() -> None:
    """Negative controls: a field this CRD version does not know (llm-d's pd guide sets
    `groupIdentity`, which the vendored CRD lacks), a rollout type it forbids, a CEL violation, a
    duplicate role, a role name the pattern refuses."""
    good = sets()[0][1]
    unknown = copy.deepcopy(good)
    unknown["spec"]["roles"][0]["spec"]["groupIdentity"] = "Hash"
    assert any("'groupIdentity' was unexpected" in e for e in validate(unknown))
    recreate = copy.deepcopy(good)
    recreate["spec"]["roles"][1]["spec"]["rolloutStrategy"]["type"] = "Recreate"
    assert any("'Recreate' is not one of ['RollingUpdate']" in e for e in validate(recreate))
    zero = copy.deepcopy(good)
    zero["spec"]["roles"][1]["spec"]["replicas"] = 0
    assert any("replicas must be zero" in e for e in validate(zero))
    twice = copy.deepcopy(good)
    twice["spec"]["roles"][1]["name"] = "prefill"
    assert any("duplicate role names" in e for e in validate(twice))
    upper = copy.deepcopy(good)
    upper["spec"]["roles"][0]["name"] = "Prefill"
    assert any("does not match" in e for e in validate(upper))
    pod = copy.deepcopy(good)
    pod["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["size"] = "two"
    assert any("'two' is not of type 'integer'" in e for e in validate(pod))


def _lws(rendering: str) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(rendering)
        if d and d["kind"] == "LeaderWorkerSet"
    }


@pytest.mark.parametrize("base", [BASE, OVERLAY], ids=["base", "overlay"])
def test_each_role_is_the_leader_worker_set_it_replaces(base: Path) -> None:
    """Rendered with and without the component (and gke-mnnvl before it on the base): the role holds
    the LWS's replicas, startupPolicy, labels and leaderWorkerTemplate unchanged."""
    components = ("gke-mnnvl",) if base == BASE else ()
    plain = _lws(with_components(base, (*components, "monitoring")))
    (doc,) = [
        d
        for d in yaml.safe_load_all(with_components(base, (*components, "disaggregated-set")))
        if d and d["kind"] == "DisaggregatedSet"
    ]
    for role in doc["spec"]["roles"]:
        lws = plain[ROLES[role["name"]]]
        assert role["spec"]["replicas"] == lws["spec"]["replicas"]
        assert role["spec"]["startupPolicy"] == lws["spec"]["startupPolicy"]
        assert role["metadata"]["labels"] == lws["metadata"]["labels"]
        assert role["spec"]["leaderWorkerTemplate"] == lws["spec"]["leaderWorkerTemplate"]
    assert doc["metadata"]["namespace"] == NAMESPACE


def _group_env(template: dict[str, Any], lws_name: str) -> dict[str, str]:
    spec = template["workerTemplate"]["spec"]
    downward = {"LWS_NAME": lws_name}
    return (
        pod_env(spec, spec["containers"][0])
        | downward
        | lws_env(f"{lws_name}-0.{lws_name}.{NAMESPACE}", template["size"])
    )


@pytest.mark.parametrize("role", list(ROLES))
def test_every_pod_of_a_role_plans_as_its_leader_worker_set_did(role: str, run_cli: Any) -> None:
    """plan --group of the role's template under the child LWS's name: every pod's plan is the plain
    LWS's, but for the leader's address (which LWS derives from its own name in both cases)."""
    (doc,) = [d for n, d in sets() if n.startswith(f"{OVERLAY.relative_to(ROOT)} + disaggregated-set ")]
    (spec,) = [r for r in doc["spec"]["roles"] if r["name"] == role]
    lws = next(
        d
        for n, d in DOCS
        if n.startswith(f"{OVERLAY.relative_to(ROOT)} (kustomize)#") and d["metadata"]["name"] == ROLES[role]
    )
    child = CHILD.format(role=role)
    code, in_set, err = run_cli(
        "plan", "--group", "--format", "json", env=_group_env(spec["spec"]["leaderWorkerTemplate"], child)
    )
    assert code == 0, err
    code, alone, err = run_cli(
        "plan",
        "--group",
        "--format",
        "json",
        env=_group_env(lws["spec"]["leaderWorkerTemplate"], ROLES[role]),
    )
    assert code == 0, err
    pods = json.loads(in_set)["pods"]
    assert len(pods) == spec["spec"]["leaderWorkerTemplate"]["size"]
    assert in_set.replace(child, ROLES[role]) == alone


def test_the_vendored_crd_says_where_it_comes_from() -> None:
    header = DISAGGREGATED_SET_CRD.read_text().split("---", 1)[0]
    assert "kubernetes-sigs/lws" in header and "Apache-2.0" in header
    assert "060ab4da17eea1f0865fcbd3236bb1075e2cea32" in header
    assert "config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml" in header
