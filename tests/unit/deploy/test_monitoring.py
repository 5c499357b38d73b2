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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from healthchecks.metrics import METRICS
from tests.unit.repo.markdown import anchors, slug, split_fences

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
    return [t["expr"] for panel in dashboard_panels() for t in panel["targets"]]


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
    labels: dict[str, str]  # over POD's (a launcher's alert), or exactly these (fleet=True)
    also: tuple[dict[str, str], ...] = ()  # more pods it fires on at fires_at: their labels over POD's
    value: float = 1.0  # the alert's value at fires_at, for a description that prints it
    fleet: bool = False  # from kube-state-metrics and targets: no launcher's POD labels


KV = "llmd_launcher_engine_kv_transfer_total"
NIXL_FAILED, NIXL_XFERS = "vllm:nixl_num_failed_transfers_total", "vllm:nixl_xfer_time_seconds_count"
QUERIES, HITS = "vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"


def _s(name: str, **labels: str) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in {**POD, **labels}.items())
    return f"{name}{{{inner}}}"


def _k(name: str, **labels: str) -> str:
    """A series of kube-state-metrics (or a target's `up`): its own labels, not a launcher's."""
    inner = ", ".join(f'{k}="{v}"' for k, v in {"namespace": POD["namespace"], **labels}.items())
    return f"{name}{{{inner}}}"


DECODE = "kimi-k3-1-gpu-vllm-decode"
PREFILL = "kimi-k3-1-gpu-vllm-prefill"
KSM = {"job": "kube-state-metrics", "instance": "10.0.9.9:8080"}


def _target(lws: str, group: int, index: int, ip: str) -> dict[str, str]:
    """A launcher target as the PodMonitor labels it (podTargetLabels, endpoint = the port name)."""
    pod = f"{lws}-{group}" + (f"-{index}" if index else "")
    return {"endpoint": "probes", "instance": f"{ip}:8090", "pod": pod,
            "leaderworkerset_sigs_k8s_io_name": lws, "leaderworkerset_sigs_k8s_io_group_index": str(group),
            "leaderworkerset_sigs_k8s_io_worker_index": str(index)}  # fmt: skip


def _created(lws: str, group: int, uid: str, created: int, values: str) -> dict[str, str]:
    """kube-state-metrics' kube_pod_created and kube_pod_labels of one incarnation (uid) of a leader."""
    pod = f"{lws}-{group}"
    labels = {"label_leaderworkerset_sigs_k8s_io_name": lws, "label_leaderworkerset_sigs_k8s_io_group_index":
              str(group), "label_leaderworkerset_sigs_k8s_io_worker_index": "0"}  # fmt: skip
    return {
        _k("kube_pod_created", pod=pod, uid=uid, **KSM): values.replace("V", str(created)),
        _k("kube_pod_labels", pod=pod, uid=uid, **KSM, **labels): values.replace("V", "1"),
    }


def _decode(counter: str, **labels: str) -> str:
    """A decode pod's relayed KV-transfer counter."""
    return _s(KV, source="engine", pool="decode", role="decode", counter=counter, **labels)


def _span(first: int, last: int | None, value: Callable[[int], int]) -> str:
    """promtool values, one a minute: missing before minute `first`, value(minute) from `first` to
    `last` (None: to 60, still there), stale after `last`."""
    minutes = range(first, 61 if last is None else last + 1)
    return " ".join(["_"] * first + [str(value(m)) for m in minutes] + ([] if last is None else ["stale"]))


def _incarnation(target: dict[str, str], first: int, last: int | None, *, budget: int,
                 ready_at: int | None = None, held_per_minute: int = 0) -> dict[str, str]:  # fmt: skip
    """One launcher of a pool pod, from minute `first` to `last`: its target's `up`, `ready` (from
    minute `ready_at`; None: never), and the start-up budget it exposes (deadline = start + budget +
    the time held while parked)."""
    start = first * 60

    def held(minute: int) -> int:
        return (minute - first) * held_per_minute

    return {
        _k("up", **target): _span(first, last, lambda _: 1),
        _k("llmd_launcher_ready", **target): _span(
            first, last, lambda m: int(ready_at is not None and m >= ready_at)
        ),
        _k("llmd_launcher_process_start_time_seconds", **target): _span(first, last, lambda _: start),
        _k("llmd_launcher_startup_held_seconds", **target): _span(first, last, held),
        _k("llmd_launcher_startup_deadline_timestamp_seconds", **target): _span(
            first, last, lambda m: start + budget + held(m)
        ),
    }


def _group(lws: str, ip: str, first: int, last: int | None, **kwargs: Any) -> dict[str, str]:
    """A group of two pods (leader and worker) of `lws` living from minute `first` to `last`."""
    return _incarnation(_target(lws, 0, 0, f"{ip}.1"), first, last, **kwargs) | _incarnation(
        _target(lws, 0, 1, f"{ip}.2"), first, last, **kwargs
    )


NOT_READY = {
    "namespace": POD["namespace"],
    "leaderworkerset_sigs_k8s_io_name": DECODE,
    "leaderworkerset": DECODE,
}


CASES = {
    "LlmdLauncherParked": Case(
        {_s("llmd_launcher_parked", setting="LLMD_RECIPE", heals="rollout"): "1x10"},
        "6m",
        "4m",
        {"setting": "LLMD_RECIPE", "heals": "rollout"},
    ),
    "LlmdLauncherRestarts": Case(
        {_s("llmd_launcher_process_restarts_total", process="render"): "0 0 0 0 5 6x15"},
        "10m",
        "6m",
        {"process": "render"},
        value=6,
    ),
    # One lost batch pages no one; losses every few minutes for 15 minutes do.
    "LlmdLauncherKvEventsLost": Case(
        {_s("llmd_launcher_kv_event_batches_lost_total", rank="0"): "0 0 0 2+2x30"},
        "19m",
        "10m",
        {"rank": "0"},
    ),
    "LlmdLauncherKvEventsSilent": Case(
        {_s("llmd_launcher_kv_event_silent", rank="0"): "1x20"}, "11m", "9m", {"rank": "0"}
    ),
    "LlmdLauncherCapabilityAbsent": Case(  # a peer's side channel, expected: the alert names the peer
        {
            _s(
                "llmd_launcher_capability",
                capability="kv-transfer.peer-side-channel-reachable",
                level="expected",
                target="peer prefill 10.0.0.2:5600",
                state="absent",
            ): "0 0 1x15"
        },
        "13m",
        "11m",
        {
            "capability": "kv-transfer.peer-side-channel-reachable",
            "level": "expected",
            "target": "peer prefill 10.0.0.2:5600",
        },
    ),
    "LlmdLauncherBlockSizeMismatch": Case(
        {_s("llmd_launcher_kv_event_block_size_mismatch", rank="0"): "0 1x10"}, "7m", "5m", {"rank": "0"}
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
            _s("llmd_launcher_kv_cache_identity", model="/m", block_size="64", hash_seed="a1"): "1x30",
            _s(
                "llmd_launcher_kv_cache_identity",
                instance="10.0.0.2:8090",
                pod="kimi-d-0",
                model="/m",
                block_size="64",
                hash_seed="b2",
            ): "_ _ _ 1x30",
            _s(
                "llmd_launcher_kv_cache_identity",
                instance="10.0.0.3:8090",
                pod="other-0",
                model="/o",
                block_size="16",
                hash_seed="c3",
            ): "1x30",
            _s(  # the same model in another namespace (another deployment): not a KV peer
                "llmd_launcher_kv_cache_identity",
                instance="10.0.1.4:8090",
                namespace="staging",
                pod="kimi-s-0",
                model="/m",
                block_size="16",
                hash_seed="d4",
            ): "1x30",
        },
        "19m",
        "10m",
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
    # The deadline is at Unix time 1000 (test time starts at 0): 940 s left at 1m, under 600 s from
    # 7m, firing a minute later. A second pod past start-up with the same deadline never fires.
    "LlmdLauncherStartupDeadlineNear": Case(
        {
            _s("llmd_launcher_startup_deadline_timestamp_seconds"): "1000x15",
            _s("llmd_launcher_startup_phase", phase="started"): "0x15",
            _s("llmd_launcher_startup_phase", phase="stopping"): "0x15",
            _s("llmd_launcher_startup_deadline_timestamp_seconds", instance="10.0.0.2:8090"): "1000x15",
            _s("llmd_launcher_startup_phase", instance="10.0.0.2:8090", phase="started"): "1x15",
            _s("llmd_launcher_startup_phase", instance="10.0.0.2:8090", phase="stopping"): "0x15",
        },
        "8m",
        "1m",
        {},
    ),
    # The decode pool wants 1 group; its launchers answered for 10 minutes, then its pods went away
    # (evicted, pending on a node, an image that does not start). The prefill pool answers throughout.
    "LlmdLauncherPoolUnscraped": Case(
        {
            _k("kube_statefulset_replicas", statefulset=DECODE, **KSM): "1x60",
            _k("kube_statefulset_replicas", statefulset=PREFILL, **KSM): "3x60",
            _k("up", **_target(DECODE, 0, 0, "10.0.0.5")): "1x10 stale",
            _k("up", **_target(DECODE, 0, 1, "10.0.0.6")): "1x10 stale",
            _k("up", **_target(PREFILL, 0, 0, "10.0.0.7")): "1x60",
        },
        "30m",
        "20m",
        {"namespace": POD["namespace"], "statefulset": DECODE, "leaderworkerset": DECODE, **KSM},
        fleet=True,
    ),
    # The master's pod went away at 10m (the donors, scraped throughout, do not fire); the engines'
    # Deployment-less pools are not its business.
    "LlmdLauncherStoreUnscraped": Case(
        {
            _k("kube_deployment_spec_replicas", deployment="mooncake-master", **KSM): "1x60",
            _k("kube_daemonset_status_desired_number_scheduled", daemonset="mooncake-donor", **KSM): "2x60",
            _k(
                "up",
                endpoint="probes",
                instance="10.0.7.1:8090",
                pod="mooncake-master-5d9c-x2",
                app_kubernetes_io_name="mooncake-master",
            ): "1x10 stale",
            _k(
                "up",
                endpoint="probes",
                instance="10.0.7.2:8090",
                pod="mooncake-donor-a1",
                app_kubernetes_io_name="mooncake-donor",
            ): "1x60",
        },
        "30m",
        "20m",
        {
            "namespace": POD["namespace"],
            "deployment": "mooncake-master",
            "workload": "mooncake-master",
            **KSM,
        },
        fleet=True,
    ),
    # A new pool (budget 20 minutes), never ready: its groups load until their launchers end them at
    # the deadline (20m) and load again. Not ready since its first answer (0): pending from 21m, firing
    # 5 minutes later.
    "LlmdLauncherPoolNotReady": Case(
        _group(DECODE, "10.0.8", 0, 20, budget=1200) | _group(DECODE, "10.0.9", 21, None, budget=1200),
        "27m",
        "19m",
        NOT_READY,
        value=27 * 60,
        fleet=True,
    ),
    # Group 0's leader created 5 times in 50 minutes (every 10 minutes a new uid): from the fifth
    # creation (40m) the count is over 4, firing 5 minutes later. Group 1, created once, never fires.
    "LlmdLauncherGroupRecreateLoop": Case(
        {
            **_created(DECODE, 0, "u1", 0, "Vx9 stale"),
            **_created(DECODE, 0, "u2", 600, "_x10 Vx9 stale"),
            **_created(DECODE, 0, "u3", 1200, "_x20 Vx9 stale"),
            **_created(DECODE, 0, "u4", 1800, "_x30 Vx9 stale"),
            **_created(DECODE, 0, "u5", 2400, "_x40 Vx20"),
            **_created(DECODE, 1, "v1", 0, "Vx60"),
        },
        "45m",
        "25m",
        {"namespace": POD["namespace"], "leaderworkerset": DECODE, "group": "0"},
        value=5,
        fleet=True,
    ),
}

# More cases of an alert than its one in CASES.
MORE_CASES = (
    # The pool served until a rollout at 10m; the new group (budget 20 minutes) parks on a recipe
    # mistake that heals only by another rollout, its deadline held while parked. Not ready since 10m:
    # over the budget from 31m, firing at 36m.
    ("LlmdLauncherPoolNotReady", Case(
        _group(DECODE, "10.0.8", 0, 10, budget=1200, ready_at=0)
        | _group(DECODE, "10.0.9", 11, None, budget=1200, held_per_minute=60),
        "37m", "29m", NOT_READY, value=27 * 60, fleet=True,
    )),
    # A slow recreate loop: the pool served until 10m, then each incarnation (budget 30 minutes) loads
    # for 10 minutes, its engine dies and the group is recreated 2 minutes later, never ready. Not
    # ready since 10m: over the budget from 41m, firing at 46m.
    ("LlmdLauncherPoolNotReady", Case(
        _group(DECODE, "10.0.8", 0, 10, budget=1800, ready_at=0)
        | _group(DECODE, "10.0.9", 12, 22, budget=1800)
        | _group(DECODE, "10.0.10", 24, 34, budget=1800)
        | _group(DECODE, "10.0.11", 36, 46, budget=1800)
        | _group(DECODE, "10.0.12", 48, None, budget=1800),
        "47m", "39m", NOT_READY, value=37 * 60, fleet=True,
    )),
    # A loop of one recreation every 3 hours: never more than 3 in 6 hours, the fifth creation in a
    # day (720m) fires 5 minutes later.
    ("LlmdLauncherGroupRecreateLoop", Case(
        {key: value for k in range(5) for key, value in _created(
            DECODE, 0, f"s{k}", k * 10800, f"{'_x' + str(180 * k) + ' ' if k else ''}Vx{178 if k < 4 else 20}"
            + (" stale" if k < 4 else "")).items()},
        "726m", "716m", {"namespace": POD["namespace"], "leaderworkerset": DECODE, "group": "0"},
        value=5, fleet=True,
    )),
)  # fmt: skip

TEMPLATE = re.compile(r"\{\{ \$(labels\.(\w+)|value \| printf \"%\.0f\") \}\}")


def rendered(text: str, labels: dict[str, str], value: float) -> str:
    """An annotation as Prometheus renders it, for the templates the rules use."""
    return TEMPLATE.sub(lambda m: labels[m[2]] if m[2] else f"{value:.0f}", text)


def test_every_alert_has_a_promtool_case() -> None:
    assert sorted(CASES) == sorted(rule["alert"] for rule in rules())


def _expected(rule: dict[str, Any], labels: dict[str, str], value: float) -> dict[str, Any]:
    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: rendered(v, labels, value) for k, v in rule["annotations"].items()},
    }


def promtool_tests() -> dict[str, Any]:
    tests = []
    by_name = {rule["alert"]: rule for rule in rules()}
    for name, case in [*CASES.items(), *MORE_CASES]:
        rule = by_name[name]
        labels = case.labels if case.fleet else {**POD, **case.labels}
        fired = [_expected(rule, labels, case.value), *(_expected(rule, {**labels, **more}, case.value)
                 for more in case.also)]  # fmt: skip
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [
                {"eval_time": case.quiet_at, "alertname": rule["alert"], "exp_alerts": []},
                {"eval_time": case.fires_at, "alertname": rule["alert"], "exp_alerts": fired},
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
    parked = spec["tests"][0]
    parked["input_series"][0]["values"] = "0x10"
    done = run_promtool_tests(tmp_path, spec)
    assert done.returncode != 0 and "LlmdLauncherParked" in done.stdout + done.stderr


@pytest.mark.parametrize("rule", rules(), ids=[r["alert"] for r in rules()])
def test_every_alert_links_a_runbook_section_that_exists(rule: dict[str, Any]) -> None:
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_URL)
    assert url.removeprefix(RUNBOOK_URL) in anchors(RUNBOOK.read_text())
    assert rule["annotations"]["summary"]


def test_alerts_and_the_dashboard_name_only_metrics_the_launcher_declares() -> None:
    named = {n for expr in [r["expr"] for r in rules()] + dashboard_exprs() for n in NAME.findall(expr)}
    assert "llmd_launcher_forward_stalled" in named and "llmd_launcher_process_resident_memory_bytes" in named
    assert named - exported_names() - set(NOT_YET_SERVED) == set()
    assert set(NOT_YET_SERVED) & exported_names() == set(), "now served: drop it from NOT_YET_SERVED"


def test_the_dashboard_selects_the_launchers_own_series_only() -> None:
    """Issue #34: the launcher's CPU/memory panel read bare process_*, which vLLM serves too on the same
    pod and container (the PodMonitor scrapes both): every name a panel or alert reads is the
    launcher's own prefix, so no engine series mixes in."""
    named = {n for expr in [r["expr"] for r in rules()] + dashboard_exprs() for n in NAME.findall(expr)}
    assert {n for n in named if not n.startswith("llmd_launcher_")} == set()
    exprs = " ".join(dashboard_exprs())
    assert (
        "llmd_launcher_process_cpu_seconds_total" in exprs
        and "llmd_launcher_process_resident_memory_bytes" in exprs
    )


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    """Start-up phase timeline, weight-load progress, restarts, KV-event health, forward progress."""
    exprs = " ".join(dashboard_exprs())
    wanted = ("startup_phase", "weight_load_progress_ratio", "process_restarts_total", "kv_event_silent",
              "forward_last_progress_timestamp_seconds", "build_info")  # fmt: skip
    for name in wanted:
        assert f"llmd_launcher_{name}" in exprs, name


def dashboard_panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads((MONITORING / "dashboard.json").read_text())["panels"]
    return panels


# What a time series' expression measures, by its outermost function and the metric's name (first
# match wins), as the unit Grafana draws it in.
UNITS = (
    (re.compile(r"^time\(\) - |_seconds\{|_seconds$"), "s"),
    (re.compile(r"rate\(llmd_launcher_process_cpu_seconds_total|_ratio\{"), "percentunit"),
    (re.compile(r"_bytes\{"), "bytes"),
    (re.compile(r"\brate\("), "ops"),
    (re.compile(r"\bincrease\("), "short"),
    (re.compile(r"_(up|ready|live|stalled|silent|mismatch|lost|parked)\{"), "bool"),
)


def unit_of(expr: str) -> str | None:
    return next((unit for pattern, unit in UNITS if pattern.search(expr)), None)


@pytest.mark.parametrize("panel", [p for p in dashboard_panels() if p["type"] == "timeseries"],
                         ids=lambda p: p["title"])  # fmt: skip
def test_every_graph_draws_one_unit_and_says_which(panel: dict[str, Any]) -> None:
    """Issue #40: panels mixed seconds with 0/1 flags and counts with rates on one axis."""
    units = {unit_of(target["expr"]) for target in panel["targets"]}
    assert units == {panel["fieldConfig"]["defaults"].get("unit")}, units


def test_a_pool_picks_the_pods() -> None:
    """The pool variable (build_info's `pool`) narrows the pod variable, which every panel reads."""
    variables = {
        v["name"]: v for v in json.loads((MONITORING / "dashboard.json").read_text())["templating"]["list"]
    }
    assert "label_values(llmd_launcher_build_info{" in variables["pool"]["query"]
    assert 'pool=~"$pool"' in variables["pod"]["query"]
    for panel in dashboard_panels():
        assert all('pod=~"$pod"' in t["expr"] for t in panel["targets"]), panel["title"]


def test_the_dashboard_shows_the_p_d_alerts_and_why_pods_are_parked() -> None:
    exprs = {t["expr"] for panel in dashboard_panels() for t in panel["targets"]}
    assert any('counter=~".*failed.*"' in e and KV in e for e in exprs)  # LlmdLauncherKvTransferFailures
    assert any(QUERIES in e for e in exprs) and any(HITS in e for e in exprs)  # ...DecodeNoExternalPrefixHits
    parked = [p for p in dashboard_panels() if any("llmd_launcher_parked" in t["expr"] for t in p["targets"])]
    assert parked and parked[0]["type"] == "table"
    assert "setting" in parked[0]["targets"][0]["expr"] and "heals" in parked[0]["targets"][0]["expr"]


# The day-to-day a page must not wake anyone for: every alert stays silent at every time listed.
IDENTITY = {"model": "/models/Kimi-K3.1-Pro", "block_size": "2048", "hash_seed": "3f2a9c1e0b7d"}


def _launcher(target: dict[str, str], values: str, deadline: int = 7200) -> dict[str, str]:
    """What a healthy launcher's scrape yields while it lives (`values`: V where a sample is): `up`,
    ready, its KV identity, a start-up deadline far away (Unix time `deadline`; test time starts at 0)."""
    own = {"instance": target["instance"], "pod": target["pod"]}
    ones = values.replace("V", "1")
    started = re.match(r"_x(\d+) ", values)
    return {
        _k("up", **target): ones,
        _k("llmd_launcher_ready", **target): ones,
        _k("llmd_launcher_process_start_time_seconds", **target): values.replace(
            "V", str(60 * int(started[1]) if started else 0)
        ),
        _k("llmd_launcher_startup_held_seconds", **target): values.replace("V", "0"),
        _s("llmd_launcher_kv_cache_identity", **own, **IDENTITY): ones,
        _s("llmd_launcher_startup_deadline_timestamp_seconds", **own): values.replace("V", str(deadline)),
        _s("llmd_launcher_startup_phase", **own, phase="started"): ones,
    }


def _rolling_update() -> dict[str, str]:
    """Prefill's 3 groups replaced one at a time (LWS maxUnavailable 1): each down 3 minutes."""
    series = {_k("kube_statefulset_replicas", statefulset=PREFILL, **KSM): "3x60"}
    for group in range(3):
        down = 10 + 15 * group
        series |= _launcher(_target(PREFILL, group, 0, f"10.0.1.{group}"), f"Vx{down} stale")
        series |= _launcher(_target(PREFILL, group, 0, f"10.0.2.{group}"), f"_x{down + 3} Vx{57 - down}")
        series |= _created(PREFILL, group, f"p{group}", 0, f"Vx{down} stale")
        series |= _created(PREFILL, group, f"q{group}", down * 60, f"_x{down + 1} Vx{59 - down}")
    return series


def _recreation() -> dict[str, str]:
    """The decode group recreated once: a peer was lost (the signal lasts one scrape before the pod
    ends itself) and the engine stalled; the new pods answer 2 minutes later."""
    series = {_k("kube_statefulset_replicas", statefulset=DECODE, **KSM): "1x60"}
    for index in range(4):
        old, new = _target(DECODE, 0, index, f"10.0.3.{index}"), _target(DECODE, 0, index, f"10.0.4.{index}")
        series |= _launcher(old, "Vx10 stale") | _launcher(new, "_x12 Vx48")
        own = {"instance": old["instance"], "pod": old["pod"]}
        series[_s("llmd_launcher_peer_lost", **own, peer="worker 3")] = "0x9 1 stale"
        series[_s("llmd_launcher_forward_stalled", **own, source="engine")] = "0x9 1 stale"
    series |= _created(DECODE, 0, "d1", 0, "Vx10 stale") | _created(DECODE, 0, "d2", 660, "_x11 Vx49")
    return series


def _parked_then_healed() -> dict[str, str]:
    """A pod parked 3 minutes on a recipe mistake, fixed in place: it starts where it stands."""
    target = _target(DECODE, 0, 0, "10.0.5.1")
    own = {"instance": target["instance"], "pod": target["pod"]}
    return (
        {_k("kube_statefulset_replicas", statefulset=DECODE, **KSM): "1x30"}
        | _launcher(target, "Vx30")
        | {_s("llmd_launcher_parked", **own, setting="LLMD_RECIPE_FILE", heals="in place"): "1x3 stale"}
    )


def _scaled_to_zero() -> dict[str, str]:
    """The TPU pool scaled to 0 groups at 10m, and the master to 0 pods: their launchers go away, as
    asked."""
    tpu = "kimi-k3-1-tpu-sglang-decode"
    series = {_k("kube_statefulset_replicas", statefulset=tpu, **KSM): "2x10 0x50"}
    for group in range(2):
        series |= _launcher(_target(tpu, group, 0, f"10.0.6.{group}"), "Vx10 stale")
    master = {"endpoint": "probes", "instance": "10.0.7.1:8090", "pod": "mooncake-master-5d9c-x2",
              "app_kubernetes_io_name": "mooncake-master"}  # fmt: skip
    series[_k("kube_deployment_spec_replicas", deployment="mooncake-master", **KSM)] = "1x10 0x50"
    series |= _launcher(master, "Vx10 stale")
    return series


def _one_group_rollout() -> dict[str, str]:
    """A one-group pool rolled at 10m: no pod ready while the new group loads for 25 minutes, within
    its budget (LLMD_STARTUP_SECONDS 2700, the default)."""
    return (
        {_k("kube_statefulset_replicas", statefulset=DECODE, **KSM): "1x60"}
        | _group(DECODE, "10.0.8", 0, 10, budget=2700, ready_at=0)
        | _group(DECODE, "10.0.9", 11, None, budget=2700, ready_at=36)
    )


QUIET = {
    "a one-group pool's rollout": (_one_group_rollout(), ("20m", "35m", "40m", "59m")),
    "a rolling update": (_rolling_update(), ("5m", "12m", "30m", "45m", "59m")),
    "a normal recreation": (_recreation(), ("10m", "11m", "20m", "40m")),
    "a parked pod that heals": (_parked_then_healed(), ("2m", "4m", "10m", "25m")),
    "a pool scaled to zero": (_scaled_to_zero(), ("11m", "30m", "59m")),
}


def quiet_tests(scenarios: dict[str, tuple[dict[str, str], tuple[str, ...]]]) -> dict[str, Any]:
    names = [rule["alert"] for rule in rules()]
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [
        {"name": scenario, "interval": "1m",
         "input_series": [{"series": s, "values": v} for s, v in series.items()],
         "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": []}
                             for at in times for name in names]}
        for scenario, (series, times) in scenarios.items()
    ]}  # fmt: skip


def test_no_alert_fires_on_the_day_to_day(tmp_path: Path) -> None:
    done = run_promtool_tests(tmp_path, quiet_tests(QUIET))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_quiet_cases_can_fail(tmp_path: Path) -> None:
    """A control: the recreation with its decode pods never coming back pages (the pool is gone)."""
    series, _ = QUIET["a normal recreation"]
    gone = {s: v for s, v in series.items() if "10.0.4." not in s}
    done = run_promtool_tests(tmp_path, quiet_tests({"gone": (gone, ("40m",))}))
    assert done.returncode != 0 and "LlmdLauncherPoolUnscraped" in done.stdout + done.stderr


# Alerts that page (severity critical): users are hurt now and a human must act. Each with why.
PAGES = {
    "LlmdLauncherPoolUnscraped": "no launcher of a pool answers for 15 minutes: the pool serves nothing "
    "and a recreation would have answered within minutes",
    "LlmdLauncherPoolNotReady": "no pod of a pool ready for longer than its start-up budget: the pool "
    "serves nothing, and a rollout or recreation would have been ready within it",
}
# Signals set only in the seconds before the launcher ends its own pod: an alert on them fires (if
# ever) for a pod that is already gone. Their recreation is LlmdLauncherGroupRecreateLoop's.
ONLY_BEFORE_THE_END = {
    "llmd_launcher_forward_stalled": "the forward-progress watcher ends the pod once it judges it stalled",
    "llmd_launcher_peer_lost": "the peer watcher ends the pod once it judges a member lost",
}


def runbook_headings() -> dict[str, str]:
    """anchor -> heading text of each section of the runbook."""
    prose, _ = split_fences(RUNBOOK.read_text())
    return {
        slug(line.lstrip("#").strip()): line.lstrip("#").strip() for line in prose if line.startswith("#")
    }


@pytest.mark.parametrize("rule", rules(), ids=[r["alert"] for r in rules()])
def test_every_alert_is_fit_to_page_on(rule: dict[str, Any]) -> None:
    """A `for:`; a summary; a description naming the pod or pool, the reason (its own words) and the
    runbook section by its heading; critical only where PAGES says why."""
    assert rule.get("for"), "no for: one bad scrape would fire it"
    notes = rule["annotations"]
    assert {"summary", "description", "runbook_url"} <= notes.keys()
    names = ("pod", "leaderworkerset", "workload")  # the pod, or the pool: an LWS, the store's workload
    assert any(f"{{{{ $labels.{name} }}}}" in notes["description"] for name in names)
    heading = runbook_headings()[notes["runbook_url"].removeprefix(RUNBOOK_URL)]
    assert f'Runbook: "{heading}"' in " ".join(notes["description"].split())
    assert rule["labels"]["severity"] in ("warning", "critical")
    assert (rule["labels"]["severity"] == "critical") == (rule["alert"] in PAGES)


def test_no_alert_reads_a_signal_that_lasts_only_until_the_pod_ends() -> None:
    named = {n for r in rules() for n in NAME.findall(r["expr"])}
    assert named & set(ONLY_BEFORE_THE_END) == set()


def _kept(endpoint: dict[str, Any], labels: dict[str, str]) -> bool:
    """prometheus-operator's `keep` relabelings on a pod's labels (the only action the PodMonitor uses)."""
    for rule in endpoint.get("relabelings", []):
        assert rule["action"] == "keep" and len(rule["sourceLabels"]) == 1
        (source,) = rule["sourceLabels"]
        meta = {
            "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9]", "_", k): v for k, v in labels.items()
        }
        if not re.fullmatch(rule["regex"], meta.get(source, "")):
            return False
    return True


def unserved_targets(monitor: dict[str, Any], run_cli: Any) -> list[str]:
    """Every target the PodMonitor makes (a pod whose container declares the endpoint's port name and
    that its relabelings keep) on a port the pod's plan does not listen on, one line per pod of every
    group (replicas x size)."""
    from tests.manifests import lws_env
    from tests.unit.deploy.test_manifests import NAMESPACE, WORKLOADS, pod_env, pod_templates

    problems = []
    for _, doc in WORKLOADS:
        templates = pod_templates(doc)
        spec = templates[0]["spec"]
        env = pod_env(spec, spec["containers"][0])
        if doc["kind"] == "LeaderWorkerSet":
            name = doc["metadata"]["name"]
            env |= lws_env(f"{name}-0.{name}.{NAMESPACE}", len(templates))
            code, out, err = run_cli("plan", "--group", "--format", "json", env=env)
            plans, replicas = json.loads(out)["pods"], doc["spec"]["replicas"]
        else:
            code, out, err = run_cli("plan", "--format", "json", env=env)
            plans, replicas = [json.loads(out)], 1
        assert code == 0, err
        for index, (plan, template) in enumerate(zip(plans, templates, strict=True)):
            served = {port["port"] for p in plan["processes"] for port in p["ports"]} | {
                plan["probes"]["port"]
            }
            declared = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
            for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                port = declared.get(endpoint["port"])
                if (
                    port is not None
                    and _kept(endpoint, template["metadata"]["labels"])
                    and port not in served
                ):
                    problems += [
                        f"{doc['metadata']['name']} pod {index}: {endpoint['port']} :{port}"
                    ] * replicas
    return problems


def podmonitor() -> dict[str, Any]:
    monitor: dict[str, Any] = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    return monitor


def test_every_scrape_target_is_a_port_the_pod_serves(run_cli: Any) -> None:
    assert unserved_targets(podmonitor(), run_cli) == []


def test_without_the_keep_the_headless_workers_are_targets_down_for_ever(run_cli: Any) -> None:
    """The control, and the issue's count: prefill's node 1 (3 groups) and TPU hosts 1..3 (2 groups)
    declare `http` without serving it: 9 targets."""
    monitor = podmonitor()
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        endpoint.pop("relabelings", None)
    problems = unserved_targets(monitor, run_cli)
    assert len(problems) == 9 and all(": http :" in p for p in problems), problems
