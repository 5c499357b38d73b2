"""deploy/components/monitoring for the stacks people run, each rendered by kustomize and its rules
checked by promtool: prometheus-operator / kube-prometheus-stack as shipped (the `release` label its
default selectors need), the same with your own release, part-of and runbook URL (`settings/`, kustomize
replacements from a ConfigMap your kustomization generates), and GKE Managed Prometheus
(`gke-managed-prometheus/`: PodMonitorings and Rules)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.test_launcher_pods import templates
from tests.unit.deploy.test_manifests import BASE, ROOT, kustomize, validate
from tests.unit.deploy.test_monitoring import promtool

MONITORING = ROOT / "deploy" / "components" / "monitoring"
SETTINGS = {
    "release": "llmd",
    "part-of": "my-guide",
    "runbook-base-url": "https://runbooks.example.com/llm-d/runbook-stuck-group.html",
}


def render(
    components: list[str], settings: dict[str, str] | None = None, base: Path | None = BASE
) -> list[Any]:
    """A kustomization of your own: the Kimi base (or nothing), the monitoring components in order, and
    the settings ConfigMap `settings/` reads (local-config: kustomize uses it, never emits it)."""
    with tempfile.TemporaryDirectory(dir=ROOT / "deploy") as directory:
        here = Path(directory)
        kustomization: dict[str, Any] = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(base, here)] if base else [],
            "components": [os.path.relpath(MONITORING / c, here) for c in components],
        }
        if settings is not None:
            kustomization["configMapGenerator"] = [{
                "name": "llm-d-launcher-monitoring",
                "literals": [f"{k}={v}" for k, v in settings.items()],
                "options": {"disableNameSuffixHash": True,
                            "annotations": {"config.kubernetes.io/local-config": "true"}},
            }]  # fmt: skip
        (here / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return [d for d in yaml.safe_load_all(kustomize(here)) if d]


def one(docs: list[Any], kind: str, name: str = "llm-d-launcher") -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return dict(doc)


def promtool_accepts(rule_spec: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_spec))
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def runbook_urls(rules: dict[str, Any]) -> list[str]:
    return [
        r["annotations"]["runbook_url"] for g in rules["spec"]["groups"] for r in g["rules"] if "alert" in r
    ]


def pods_part_of(docs: list[Any]) -> set[str]:
    return {t["metadata"]["labels"]["app.kubernetes.io/part-of"] for d in docs for _, t in templates(d)}


def test_as_shipped_kube_prometheus_stack_selects_the_monitor_and_the_rules(tmp_path: Path) -> None:
    """kube-prometheus-stack's Prometheus selects PodMonitors and PrometheusRules by `release: <its
    Helm release>` unless told otherwise: without the label a default install reads neither."""
    docs = render([""])
    monitor, rules = one(docs, "PodMonitor"), one(docs, "PrometheusRule")
    assert (
        monitor["metadata"]["labels"]["release"]
        == rules["metadata"]["labels"]["release"]
        == "kube-prometheus-stack"
    )
    assert validate(monitor) == [] and validate(rules) == []
    assert {monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/part-of"]} == pods_part_of(docs)
    promtool_accepts(rules["spec"], tmp_path)


def test_your_release_part_of_and_runbook_reach_every_object(tmp_path: Path) -> None:
    docs = render(["", "settings"], SETTINGS, base=None)
    monitor, rules = one(docs, "PodMonitor"), one(docs, "PrometheusRule")
    dashboard = one(docs, "ConfigMap", next(d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"))
    assert not [d for d in docs if d["metadata"]["name"] == "llm-d-launcher-monitoring"]  # local-config
    assert monitor["metadata"]["labels"]["release"] == rules["metadata"]["labels"]["release"] == "llmd"
    for labels in (
        monitor["metadata"]["labels"],
        monitor["spec"]["selector"]["matchLabels"],
        rules["metadata"]["labels"],
        dashboard["metadata"]["labels"],
    ):
        assert labels["app.kubernetes.io/part-of"] == "my-guide"
    urls = runbook_urls(rules)
    assert len(urls) >= 13 and all(u.startswith(SETTINGS["runbook-base-url"] + "#alert-") for u in urls)
    shipped = runbook_urls(one(render([""], base=None), "PrometheusRule"))
    assert [u.split("#")[1] for u in urls] == [u.split("#")[1] for u in shipped]  # every anchor kept
    assert validate(monitor) == [] and validate(rules) == []
    promtool_accepts(rules["spec"], tmp_path)


@pytest.mark.parametrize("settings", [None, SETTINGS], ids=["as shipped", "with settings"])
def test_gke_managed_prometheus_scrapes_and_alerts_the_same(
    tmp_path: Path, settings: dict[str, str] | None
) -> None:
    """PodMonitorings (monitoring.googleapis.com/v1) with the PodMonitor's endpoints and target labels,
    `http` only on the pods that serve (a PodMonitoring cannot relabel on pod labels), and the
    PrometheusRule's groups as Rules."""
    operator = render([""])
    components = ["", "gke-managed-prometheus", *(["settings"] if settings else [])]
    docs = render(components, settings)
    assert not [d for d in docs if d["kind"] in ("PodMonitor", "PrometheusRule")]
    monitor = one(operator, "PodMonitor")
    scrapes, serving = one(docs, "PodMonitoring"), one(docs, "PodMonitoring", "llm-d-launcher-serving")
    for pm in (scrapes, serving):
        assert pm["apiVersion"] == "monitoring.googleapis.com/v1"
        assert [f["from"] for f in pm["spec"]["targetLabels"]["fromPod"]] == monitor["spec"][
            "podTargetLabels"
        ]
        assert all(f["to"] == f["from"].replace(".", "_").replace("/", "_").replace("-", "_")
                   for f in pm["spec"]["targetLabels"]["fromPod"])  # fmt: skip
    endpoints = [
        {k: e[k] for k in ("port", "path", "interval")} for e in monitor["spec"]["podMetricsEndpoints"]
    ]
    assert sorted(endpoints, key=str) == sorted(
        scrapes["spec"]["endpoints"] + serving["spec"]["endpoints"], key=str
    )
    assert serving["spec"]["endpoints"] == [e for e in endpoints if e["port"] == "http"]
    assert serving["spec"]["selector"]["matchLabels"]["llm-d.ai/inference-serving"] == "true"
    part_of = settings["part-of"] if settings else pods_part_of(docs).pop()
    assert scrapes["spec"]["selector"]["matchLabels"]["app.kubernetes.io/part-of"] == part_of
    rules = one(docs, "Rules")
    assert rules["apiVersion"] == "monitoring.googleapis.com/v1"
    assert [g["name"] for g in rules["spec"]["groups"]] == [
        g["name"] for g in one(operator, "PrometheusRule")["spec"]["groups"]
    ]
    promtool_accepts(rules["spec"], tmp_path)
