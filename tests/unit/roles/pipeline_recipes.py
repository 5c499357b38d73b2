"""A Qwen3-235B-like P/D prefill pool on 2 nodes x 8 GPUs, TP 8 within each pod x PP 2 across the
pods (vLLM's documented multi-node layout), for vLLM and SGLang: shared by the unit goldens
(test_pipeline_parallel.py) and the engine tier (tests/engines/test_pipeline_accept_plans.py)."""

from __future__ import annotations

from launcher.config.recipe import Recipe
from launcher.config.recipe_file import RecipeSource, validate_recipe
from launcher.config.settings import Settings

LEADER_IP = "10.0.0.1"
ARGS = {
    "vllm": {
        "kv-transfer-config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
        "max-model-len": 32768,
    },
    "sglang": {"disaggregation-mode": "prefill", "context-length": 32768},
}


def prefill_recipe(kind: str, **pool: object) -> Recipe:
    data = {
        "name": "qwen3-pd",
        "model": {"path": "/models/Qwen3-235B-A22B", "served_name": "qwen3"},
        "default_pool": "prefill",
        "pools": {
            "prefill": {
                "kind": kind,
                "nodes": 2,
                "gpus_per_node": 8,
                "tensor_parallel": 8,
                "pipeline_parallel": 2,
                "args": ARGS[kind],
                **pool,
            }
        },
    }
    return validate_recipe(data, RecipeSource("qwen3-pd", "recipe.yaml"))


def pod(index: int) -> Settings:
    """Pod `index` of the group, as LWS starts it."""
    return Settings(leader_address=LEADER_IP, group_size=2, worker_index=index, pod_ip=f"10.0.0.{index + 1}")
