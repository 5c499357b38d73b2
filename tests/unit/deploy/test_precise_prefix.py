"""deploy/precise-prefix-cache-routing-*/: what the precise-prefix-cache-routing guide adds to a model
server Deployment (tests/fixtures/guides/precise-prefix-cache-routing-*.yaml): its render Service in
front of the model-server pods, the KV-event socket each router replica dials, and its verification
(guide.yaml's render, shared-prefix and per-pod counter steps) as a Job whose script passes only when
render returns token IDs, every request is answered and some pod counts prefix-cache hits (run with
sh, `curl` replaced by a stand-in answering as vLLM and the API server would: no network)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe import SglangPool, VllmPool
from launcher.config.recipe_file import RecipeSource, load_recipe
from tests.manifests import container_env
from tests.unit.deploy.test_guide_verify import job
from tests.unit.deploy.test_manifests import ROOT, kustomize, validate

FIXTURES = ROOT / "tests" / "fixtures" / "guides"
FACTS = {p.stem: yaml.safe_load(p.read_text()) for p in FIXTURES.glob("precise-prefix-cache-routing-*.yaml")}
VARIANTS = sorted(name for name, facts in FACTS.items() if "render_service" in facts)  # vLLM renders itself
STANDALONE = sorted(name for name, facts in FACTS.items() if "render_pool" in facts)  # SGLang does not
NAME_PREFIX = "precise-prefix-cache-routing-"  # the guide's render/ kustomization namePrefix


def rendered(directory: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(kustomize(directory)) if d]


@pytest.mark.parametrize("recipe_name", VARIANTS)
def test_the_render_service_fronts_the_pods_the_router_renders_on(recipe_name: str) -> None:
    """The guide's render Service, by its name (the router's token-producer vllm.url), selects this
    variant's model-server pods and reaches vLLM's API port on them; the router's KV-event socket is a
    container port, the recipe's kv_events.port and the router's socketPort."""
    facts = FACTS[recipe_name]
    docs = rendered(ROOT / "deploy" / recipe_name)
    for doc in docs:
        assert validate(doc) == [], doc["metadata"]["name"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    want = facts["render_service"]
    assert service["metadata"]["name"] == NAME_PREFIX + want["name"]
    assert service["spec"]["selector"] == want["selector"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert want["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == want["port"] and port["targetPort"] == want["target_port"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    pool = load_recipe(RecipeSource(recipe_name, None)).pools["decode"]
    assert isinstance(pool, VllmPool) and pool.kv_events and pool.router
    assert ports[port["targetPort"]] == pool.port == facts["pods"]["decode"]["ports"]["modelserver"]
    kv_events = facts["pods"]["decode"]["ports"]["kv-events"]
    assert ports["kv-events"] == pool.kv_events.port == pool.router.kv_events_port == kv_events


@pytest.mark.parametrize("recipe_name", STANDALONE)
def test_sglang_pods_publish_kv_events_and_the_router_renders_on_the_guides_standalone_pool(
    recipe_name: str,
) -> None:
    """SGLang serves no /v1/*/render: the Service of the same name fronts the guide's GPU-less
    `vllm launch render` pool, whose pods the InferencePool (llm-d.ai/guide) must not select."""
    facts = FACTS[recipe_name]
    docs = rendered(ROOT / "deploy" / recipe_name)
    for doc in docs:
        assert validate(doc) == [], doc["metadata"]["name"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert service["metadata"]["name"] == NAME_PREFIX + "render"
    (render,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == service["metadata"]["name"]
    ]
    (server,) = [d for d in docs if d["kind"] == "Deployment" and d is not render]
    pod = render["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert "llm-d.ai/guide" not in pod["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert [*container["command"], *container["args"]] == [
        *facts["render_pool"]["command"],
        *facts["render_pool"]["args"],
    ]
    assert render["spec"]["replicas"] == facts["render_pool"]["replicas"]
    (port,) = service["spec"]["ports"]
    assert (
        port["port"] == 8000
        and {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]] == 8000
    )
    model = load_recipe(RecipeSource(recipe_name, None)).model
    assert container["args"][0] == (model.served_name or model.path)  # the router's modelName, served
    ports = {
        p["name"]: p["containerPort"] for p in server["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    pool = load_recipe(RecipeSource(recipe_name, None)).pools["decode"]
    assert isinstance(pool, SglangPool) and pool.kv_events is not None and pool.router is not None
    assert (
        ports["kv-events"]
        == pool.kv_events.port
        == pool.router.kv_events_port
        == facts["pods"]["decode"]["ports"]["kv-events"]
    )


def check_container(recipe_name: str) -> dict[str, Any]:
    directory = ROOT / "deploy" / recipe_name / "verify"
    spec = job(directory, "precise-prefix-check")["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] > 0
    container: dict[str, Any] = spec["template"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("recipe_name", sorted(FACTS))
def test_the_check_asks_the_guides_services_for_the_served_model(recipe_name: str) -> None:
    model = load_recipe(RecipeSource(recipe_name, None)).model
    env = container_env(check_container(recipe_name))
    assert env["IP"] == "precise-prefix-cache-routing-epp"  # ${GUIDE_NAME}-epp
    assert env["RENDER"] == "precise-prefix-cache-routing-render:8000"  # the render Service, its port
    assert env["MODEL"] == (model.served_name or model.path)
    assert env["GUIDE_NAME"] == "precise-prefix-cache-routing"
    sglang = isinstance(load_recipe(RecipeSource(recipe_name, None)).pools["decode"], SglangPool)
    assert env["HITS_METRIC"] == ("sglang:cached_tokens_total" if sglang else "vllm:prefix_cache_hits_total")
    docs = rendered(ROOT / "deploy" / recipe_name / "verify")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["rules"] == [  # read-only: list the pods, read their /metrics through the proxy
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
    ]


TOKEN = "sa-token-never-printed"
TOKEN_IDS = '{"request_id":"r","token_ids":[791,35521,1817],"sampling_params":{}}'
DISABLED = '{"error":{"message":"Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.","code":403}}'  # noqa: E501
PODS = '{"items":[{"metadata":{"name":"decode-a"}},{"metadata":{"name":"decode-b"}}]}'
SGLANG_METRICS = """sglang:num_requests_total{{model_name="m",is_streaming="false"}} 5.0
sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {hits}
"""
METRICS = """# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} 21440.0
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} 5.0
"""


def run_check(
    tmp_path: Path,
    container: dict[str, Any],
    *,
    render: str,
    codes: str,
    hits: tuple[str, str],
    metrics: str = METRICS,
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """The Job's script with its env; `curl` a stand-in answering by URL (render, completions with the
    next status of `codes`, the pod list, each pod's /metrics with its hits); what curl was called with."""
    account = tmp_path / "sa"
    account.mkdir()
    (account / "namespace").write_text("llm-d-precise")
    (account / "token").write_text(TOKEN)
    (account / "ca.crt").write_text("")
    (tmp_path / "render").write_text(render)
    (tmp_path / "pods").write_text(PODS)
    for pod, count in zip(("decode-a", "decode-b"), hits, strict=True):
        (tmp_path / pod).write_text(metrics.format(hits=count))
    (tmp_path / "codes").write_text(codes)
    curl = tmp_path / "curl"
    curl.write_text(f"""#!/bin/sh
d={tmp_path}
printf '%s\\0' "$@" >> "$d/calls"; printf '\\n' >> "$d/calls"
for a in "$@"; do case "$a" in http*) url="$a";; esac; done
case "$url" in
  */v1/completions/render) cat "$d/render";;
  */v1/completions) c=$(head -c 3 "$d/codes"); tail -c +4 "$d/codes" > "$d/next"
    mv "$d/next" "$d/codes"; printf '%s' "$c";;
  */pods\\?labelSelector=*) cat "$d/pods";;
  */pods/decode-a:8000/proxy/metrics) cat "$d/decode-a";;
  */pods/decode-b:8000/proxy/metrics) cat "$d/decode-b";;
  *) exit 22;;
esac
""")
    curl.chmod(curl.stat().st_mode | stat.S_IXUSR)
    env = {**container_env(container), "SERVICE_ACCOUNT_DIR": str(account)}
    done = subprocess.run(
        [*container["command"], *container["args"]],
        env={**env, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    calls = (tmp_path / "calls").read_text().split("\n") if (tmp_path / "calls").exists() else []
    return done, [c.split("\0")[:-1] for c in calls if c]


OK = "200" * 10


@pytest.mark.parametrize(
    ("render", "codes", "hits", "outcome"),
    [
        (TOKEN_IDS, OK, ("0.0", "1472.0"), "OK: 1472 prefix-cache hit tokens across the model-server pods"),
        (DISABLED, OK, ("0.0", "1472.0"), "FAIL: render: no token IDs"),
        ("", OK, ("0.0", "1472.0"), "FAIL: render: no token IDs"),
        (TOKEN_IDS, "200" * 9 + "503", ("0.0", "1472.0"), "FAIL: 9 of 10 shared-prefix requests"),
        (TOKEN_IDS, OK, ("0.0", "0.0"), "FAIL: no prefix-cache hits on any model-server pod"),
    ],
    ids=["cache-hits", "render-403", "render-silent", "one-request-failed", "cache-blind"],
)
def test_the_check_passes_only_when_render_requests_and_cache_hits_all_hold(
    tmp_path: Path, render: str, codes: str, hits: tuple[str, str], outcome: str
) -> None:
    container = check_container("precise-prefix-cache-routing-cpu-vllm")
    done, calls = run_check(tmp_path, container, render=render, codes=codes, hits=hits)
    assert outcome in done.stdout, done.stdout + done.stderr
    assert done.returncode == (0 if outcome.startswith("OK") else 1)
    assert TOKEN not in done.stdout + done.stderr  # the ServiceAccount token is never printed
    if render == DISABLED:
        assert "--enable-scale-out" in done.stdout  # names the fix
        return
    if not render:
        return
    requests = [c for c in calls if "http://precise-prefix-cache-routing-epp/v1/completions" in c]
    assert len(requests) == 10
    prompts = [json.loads(c[c.index("-d") + 1])["prompt"] for c in requests]
    assert all(p.count("The llm-d router keeps a conversation") == 100 for p in prompts)  # the shared prefix
    assert len(set(prompts)) == 10  # each differs in its last sentence
    if codes == OK:
        metrics = [c[-1] for c in calls if c[-1].endswith("/proxy/metrics")]
        assert metrics == [
            f"https://kubernetes.default.svc/api/v1/namespaces/llm-d-precise/pods/{pod}:8000/proxy/metrics"
            for pod in ("decode-a", "decode-b")
        ]


@pytest.mark.parametrize(
    ("hits", "code"), [(("0", "311"), 0), (("0", "0"), 1)], ids=["cache-hits", "cache-blind"]
)
def test_the_sglang_check_counts_sglangs_cached_tokens(
    tmp_path: Path, hits: tuple[str, str], code: int
) -> None:
    container = check_container("precise-prefix-cache-routing-gpu-sglang")
    done, _ = run_check(tmp_path, container, render=TOKEN_IDS, codes=OK, hits=hits, metrics=SGLANG_METRICS)
    assert done.returncode == code, done.stdout + done.stderr
    assert ("OK: 311 prefix-cache hit tokens" in done.stdout) == (code == 0)
