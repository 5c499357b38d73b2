"""deploy/components/monitoring against the real tools: Debian's `promtool` (the `prometheus` package,
tests/install.sh) checks the PrometheusRule's rule file and runs a unit test per alert (it fires on
the series that should fire it, and not before); every alert links a runbook section that exists;
every metric an alert or the dashboard names is one the launcher declares (METRICS). The live check,
a real Prometheus scraping a running launcher, is tests/supervisor/test_prometheus.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from healthchecks.metrics import METRICS
from tests.unit.repo.markdown import anchors

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "deploy" / "components" / "monitoring"
RUNBOOK = ROOT / "docs" / "runbook-stuck-group.md"
RUNBOOK_URL = "https://github.com/llm-d/llm-d-launcher/blob/main/docs/runbook-stuck-group.md#"
POD = {"instance": "10.0.0.1:8090", "namespace": "llm-d-kimi-k3-1", "pod": "kimi-0"}
# Families a metric name in PromQL may carry: the declared one, a counter's _total, a histogram's parts.
NAME = re.compile(r"\b((?:llmd_launcher|process)_[a-z0-9_]+)\b")
# Named by an alert but not served by the launcher of this branch; each with why.
NOT_YET_SERVED: dict[str, str] = {}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def exported_names() -> set[str]:
    names = set()
    for metric in METRICS:
        names.add(metric.exposed)
        if metric.kind == "histogram":
            names |= {metric.full_name + part for part in ("_bucket", "_sum", "_count")}
    return names


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is needed (apt-get install prometheus; tests/install.sh installs it)"
    return found


def rule_file(directory: Path) -> Path:
    """The PrometheusRule's spec is a Prometheus rule file as it stands."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]))
    return path


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(rule_file(tmp_path))], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


@dataclass(frozen=True)
class Case:
    """Series (promtool's expanding notation, one sample a minute), when the alert fires, and an
    earlier time (or a healthy pod's series) at which it must not."""

    series: dict[str, str]  # series selector -> values
    fires_at: str
    quiet_at: str
    labels: dict[str, str]
    also: tuple[dict[str, str], ...] = ()  # more pods it fires on at fires_at: their labels over POD's


KV = "llmd_launcher_engine_kv_transfer_total"
NIXL_FAILED, NIXL_XFERS = "vllm:nixl_num_failed_transfers_total", "vllm:nixl_xfer_time_seconds_count"
QUERIES, HITS = "vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"


def _s(name: str, **labels: str) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in {**POD, **labels}.items())
    return f"{name}{{{inner}}}"


def _decode(counter: str, **labels: str) -> str:
    """A decode pod's relayed KV-transfer counter."""
    return _s(KV, source="engine", pool="decode", role="decode", counter=counter, **labels)


CASES = {
    "LlmdLauncherStalled": Case(
        {_s("llmd_launcher_forward_stalled", source="engine"): "0 0 1 1"}, "3m", "1m", {"source": "engine"}
    ),
    "LlmdLauncherParked": Case(
        {_s("llmd_launcher_parked", setting="LLMD_RECIPE", heals="rollout"): "1x10"}, "6m", "4m", {}
    ),
    "LlmdLauncherRestarts": Case(
        {_s("llmd_launcher_process_restarts_total", process="render"): "0 0 0 0 5 6"},
        "5m",
        "2m",
        {"process": "render"},
    ),
    "LlmdLauncherPeerLost": Case(
        {_s("llmd_launcher_peer_lost", peer="worker 1"): "0 0 1"}, "2m", "1m", {"peer": "worker 1"}
    ),
    "LlmdLauncherKvEventsLost": Case(
        {_s("llmd_launcher_kv_event_batches_lost_total", rank="0"): "0 0 0 2 2"}, "4m", "2m", {"rank": "0"}
    ),
    "LlmdLauncherKvEventsSilent": Case(
        {_s("llmd_launcher_kv_event_silent", rank="0"): "1x10"}, "6m", "3m", {"rank": "0"}
    ),
    "LlmdLauncherBlockSizeMismatch": Case(
        {_s("llmd_launcher_kv_event_block_size_mismatch", rank="0"): "0 1 1"}, "2m", "0m", {"rank": "0"}
    ),
    "LlmdLauncherStoreMasterRestarted": Case(
        {_s("llmd_launcher_store_master_restarts_total", master="mooncake-master:8700"): "0 0 0 1 1"},
        "4m",
        "2m",
        {"master": "mooncake-master:8700"},
    ),
    # Two pods of one model, the second planned with another PYTHONHASHSEED: both fire (neither is
    # known to be the wrong one); pods of another model, or of this one in another namespace, do not.
    "LlmdLauncherKvIdentityMismatch": Case(
        {
            _s("llmd_launcher_kv_cache_identity", model="/m", block_size="64", hash_seed="a1"): "1x10",
            _s(
                "llmd_launcher_kv_cache_identity",
                instance="10.0.0.2:8090",
                pod="kimi-d-0",
                model="/m",
                block_size="64",
                hash_seed="b2",
            ): "_ _ _ 1x10",
            _s(
                "llmd_launcher_kv_cache_identity",
                instance="10.0.0.3:8090",
                pod="other-0",
                model="/o",
                block_size="16",
                hash_seed="c3",
            ): "1x10",
            _s(  # the same model in another namespace (another deployment): not a KV peer
                "llmd_launcher_kv_cache_identity",
                instance="10.0.1.4:8090",
                namespace="staging",
                pod="kimi-s-0",
                model="/m",
                block_size="16",
                hash_seed="d4",
            ): "1x10",
        },
        "4m",
        "2m",
        {"model": "/m", "block_size": "64", "hash_seed": "a1"},
        also=(
            {
                "instance": "10.0.0.2:8090",
                "pod": "kimi-d-0",
                "model": "/m",
                "block_size": "64",
                "hash_seed": "b2",
            },
        ),
    ),
    # #32: prefill's side channel unreachable: decode counts failed transfers (and is not ended).
    "LlmdLauncherKvTransferFailures": Case(
        {_decode(NIXL_FAILED): "0 0 2 4 6 8 10 12 14", _decode(NIXL_XFERS): "0 5 10 15 20 25 30 35 40"},
        "8m",
        "3m",
        {"pool": "decode", "role": "decode"},
    ),
    # Queries grow, hits stay at 0 on decode; a decode pod whose hits grow stays quiet.
    "LlmdLauncherDecodeNoExternalPrefixHits": Case(
        {
            _decode(QUERIES): "0+100x30",
            _decode(HITS): "0x30",
            _decode(QUERIES, instance="10.0.0.2:8090", pod="kimi-d-1"): "0+100x30",
            _decode(HITS, instance="10.0.0.2:8090", pod="kimi-d-1"): "0+90x30",
        },
        "20m",
        "8m",
        {"pool": "decode", "role": "decode"},
    ),
    # The deadline is at Unix time 1000 (test time starts at 0): 940 s left at 1m, 520 s at 8m. A
    # second pod past start-up with the same deadline never fires.
    "LlmdLauncherStartupDeadlineNear": Case(
        {
            _s("llmd_launcher_startup_deadline_timestamp_seconds"): "1000x10",
            _s("llmd_launcher_startup_phase", phase="started"): "0x10",
            _s("llmd_launcher_startup_phase", phase="stopping"): "0x10",
            _s("llmd_launcher_startup_deadline_timestamp_seconds", instance="10.0.0.2:8090"): "1000x10",
            _s("llmd_launcher_startup_phase", instance="10.0.0.2:8090", phase="started"): "1x10",
            _s("llmd_launcher_startup_phase", instance="10.0.0.2:8090", phase="stopping"): "0x10",
        },
        "8m",
        "1m",
        {},
    ),
}


def expand(annotations: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    """The annotations as Prometheus renders them: `{{ $labels.X }}` is the alert's label X."""
    return {
        k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], v)
        for k, v in annotations.items()
    }


def test_every_alert_has_a_promtool_case() -> None:
    assert sorted(CASES) == sorted(rule["alert"] for rule in rules())


def promtool_tests() -> dict[str, Any]:
    tests = []
    for rule in rules():
        case = CASES[rule["alert"]]
        labels = {**POD, **rule["labels"], **case.labels}
        fired = {"exp_labels": labels, "exp_annotations": expand(rule["annotations"], labels)}
        others = [{**fired, "exp_labels": {**fired["exp_labels"], **more}} for more in case.also]
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [
                {"eval_time": case.quiet_at, "alertname": rule["alert"], "exp_alerts": []},
                {"eval_time": case.fires_at, "alertname": rule["alert"], "exp_alerts": [fired, *others]},
            ],
        })  # fmt: skip
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}


def run_promtool_tests(directory: Path, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    rule_file(directory)
    (directory / "alerts_test.yaml").write_text(yaml.safe_dump(spec))
    return subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yaml"], cwd=directory, capture_output=True, text=True
    )


def test_promtool_fires_each_alert_on_its_series_and_not_before(tmp_path: Path) -> None:
    done = run_promtool_tests(tmp_path, promtool_tests())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_promtool_cases_can_fail(tmp_path: Path) -> None:
    """A control: a case expecting a firing alert on healthy series fails."""
    spec = promtool_tests()
    stalled = spec["tests"][0]
    stalled["input_series"][0]["values"] = "0 0 0 0"
    done = run_promtool_tests(tmp_path, spec)
    assert done.returncode != 0 and "LlmdLauncherStalled" in done.stdout + done.stderr


@pytest.mark.parametrize("rule", rules(), ids=[r["alert"] for r in rules()])
def test_every_alert_links_a_runbook_section_that_exists(rule: dict[str, Any]) -> None:
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_URL)
    assert url.removeprefix(RUNBOOK_URL) in anchors(RUNBOOK.read_text())
    assert rule["annotations"]["summary"]


def test_alerts_and_the_dashboard_name_only_metrics_the_launcher_declares() -> None:
    named = {n for expr in [r["expr"] for r in rules()] + dashboard_exprs() for n in NAME.findall(expr)}
    assert "llmd_launcher_forward_stalled" in named and "process_resident_memory_bytes" in named  # control
    assert named - exported_names() - set(NOT_YET_SERVED) == set()
    assert set(NOT_YET_SERVED) & exported_names() == set(), "now served: drop it from NOT_YET_SERVED"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    """Start-up phase timeline, weight-load progress, restarts, KV-event health, forward progress."""
    exprs = " ".join(dashboard_exprs())
    wanted = ("startup_phase", "weight_load_progress_ratio", "process_restarts_total", "kv_event_silent",
              "forward_last_progress_timestamp_seconds", "build_info")  # fmt: skip
    for name in wanted:
        assert f"llmd_launcher_{name}" in exprs, name
