"""A real Prometheus (Debian's `prometheus`, listening on loopback only) scrapes a running launcher
(`run` over the stand-in engine, KV events on) and evaluates every alert and dashboard expression of
deploy/components/monitoring against what it scraped: each must be valid PromQL for the server, and
every metric it names must be in the scraped data, unless listed below with the reason it is absent
from this pod's state."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from healthchecks.metrics import METRICS
from tests.pods import LauncherPod
from tests.ports import free_port
from tests.supervisor.test_kv_events import kv_pod, wait_until
from tests.unit.deploy.test_monitoring import NAME, NOT_YET_SERVED, dashboard_exprs, exported_names, rules

# Declared and served, but only in states this single pod does not reach.
ONLY_IN_SOME_STATES = {
    "llmd_launcher_peer_up": "only in a pod with group members to watch (LWS size > 1)",
    "llmd_launcher_peer_lost": "only in a pod with group members to watch (LWS size > 1)",
    "llmd_launcher_weight_load_progress_ratio": "only while an engine prints its shard-loading progress",
    "llmd_launcher_store_master_restarts_total": "only in a pod whose KV store client registers with a "
    "master over an HTTP metadata server (Mooncake)",
    "llmd_launcher_parked": "a sample only while the pod is parked (a labelled family, empty otherwise)",
    "llmd_launcher_engine_kv_transfer_total": "only in a pod whose engine has a KV connector (P/D: "
    "tests/group/test_pd_group.py reads it)",
}
# Grafana's variables, as the dashboard's defaults ("All") expand them.
GRAFANA = {'"$namespace"': '".*"', '"$pool"': '".*"', '"$pod"': '".*"', "$__rate_interval": "1m"}


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, LauncherPod]]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is needed (apt-get install prometheus; tests/install.sh installs it)"
    pod = kv_pod(tmp_path, "wait=1.5,stored=3,lose=1,stored=2,served=2")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: launcher\n    static_configs: [{{targets: ['127.0.0.1:{pod.probe_port}']}}]\n"
    )
    server = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"),  # noqa: SIM115
    )  # fmt: skip
    pod.start()
    try:
        yield f"http://127.0.0.1:{port}", pod
    finally:
        pod.kill_everything()
        server.terminate()
        server.wait(timeout=10)


def query(url: str, expr: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5)
    body: dict[str, Any] = answer.json()
    assert body["status"] == "success", f"{expr}: {body.get('error')}"
    return body


def scraped(url: str, name: str) -> bool:
    return bool(query(url, f"group({name})")["data"]["result"])


def test_prometheus_evaluates_every_alert_and_panel_on_what_it_scraped(
    prometheus: tuple[str, LauncherPod],
) -> None:
    url, pod = prometheus
    pod.wait_probe("readyz", 200)
    wait_until(pod, "served=2")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # three scrapes after the events: rates and increases have data
        try:
            if query(url, 'count_over_time(up{job="launcher"}[1m]) >= 8 and up == 1')["data"]["result"]:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    else:
        pytest.fail("Prometheus never scraped the launcher")
    assert scraped(url, "llmd_launcher_build_info") and scraped(
        url, "llmd_launcher_process_cpu_seconds_total"
    )  # control

    exprs = [r["expr"] for r in rules()] + [_expand(e) for e in dashboard_exprs()]
    missing = set()
    for expr in exprs:
        query(url, expr)  # valid for the server, evaluated against the scraped series
        missing |= {name for name in NAME.findall(expr) if not scraped(url, name)}
    assert missing - set(ONLY_IN_SOME_STATES) - set(NOT_YET_SERVED) == set(), "named but not exported"
    assert set(ONLY_IN_SOME_STATES) <= exported_names()  # declared, only absent here
    pod.signal(signal.SIGTERM)
    assert pod.finish() == 0


def test_a_name_the_launcher_does_not_export_is_caught(prometheus: tuple[str, LauncherPod]) -> None:
    """The control: the same check finds a misspelt metric missing (the server answers an empty vector)."""
    url, pod = prometheus
    pod.wait_probe("readyz", 200)
    deadline = time.monotonic() + 20
    while not _up(url) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert scraped(url, "llmd_launcher_live")
    assert not scraped(url, "llmd_launcher_forward_stalled_typo")
    assert "llmd_launcher_forward_stalled_typo" not in {m.full_name for m in METRICS}


def _up(url: str) -> bool:
    try:
        return bool(query(url, 'up{job="launcher"} == 1')["data"]["result"])
    except httpx.TransportError:
        return False


def _expand(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    return expr
