"""Pipeline parallelism in the topology (issue #41 item 1): a pool's pipeline_parallel derives the
engine's flag, TP x PP x local DP is counted against the pod's devices, the plan says which dimension
spans the pods, and the layouts that cannot work are refused with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.contract.errors import ConfigError
from launcher.contract.plan import Parallelism
from launcher.render import plan_to_dict, render_text
from roles import build_plan
from tests.unit.roles.pipeline_recipes import LEADER_IP, pod, prefill_recipe

NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
VLLM = {
    0: ["vllm", "serve", "/models/Qwen3-235B-A22B", "--served-model-name", "qwen3", "--port", "8000",
        "--nnodes", "2", "--node-rank", "0", "--master-addr", LEADER_IP,
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--shutdown-timeout", "12",
        "--disable-access-log-for-endpoints", "/health", "--kv-transfer-config", NIXL,
        "--max-model-len", "32768"],
    1: ["vllm", "serve", "/models/Qwen3-235B-A22B", "--served-model-name", "qwen3", "--port", "8000",
        "--nnodes", "2", "--node-rank", "1", "--master-addr", LEADER_IP, "--headless",
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--shutdown-timeout", "12",
        "--kv-transfer-config", NIXL, "--max-model-len", "32768"],
}  # fmt: skip
SGLANG = {
    0: ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-235B-A22B",
        "--served-model-name", "qwen3", "--tp-size", "8", "--pp-size", "2", "--nnodes", "2",
        "--node-rank", "0", "--dist-init-addr", f"{LEADER_IP}:20000", "--host", "0.0.0.0",
        "--port", "30000", "--enable-metrics", "--disaggregation-mode", "prefill",
        "--context-length", "32768"],
    1: ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-235B-A22B",
        "--served-model-name", "qwen3", "--tp-size", "8", "--pp-size", "2", "--nnodes", "2",
        "--node-rank", "1", "--dist-init-addr", f"{LEADER_IP}:20000", "--disaggregation-mode",
        "prefill", "--context-length", "32768"],
}  # fmt: skip
LAYOUT = "TP 8 x PP 2 = 16 devices, 8 per pod: TP within each pod, PP across 2 pods (1 stage per pod)"


@pytest.mark.parametrize(("kind", "golden"), [("vllm", VLLM), ("sglang", SGLANG)], ids=["vllm", "sglang"])
@pytest.mark.parametrize("index", [0, 1])
def test_tp_in_each_pod_and_pp_across_pods(kind: str, golden: dict[int, list[str]], index: int) -> None:
    plan = build_plan(pod(index), prefill_recipe(kind))
    assert list(plan.engine.argv) == golden[index]
    assert render_text(plan).splitlines()[1] == f"# parallelism: {LAYOUT}"
    assert plan_to_dict(plan)["role"]["parallelism"] == {
        "tensor": 8, "pipeline": 2, "local_dp": 1, "devices_per_pod": 8, "spans_pods": "pipeline",
        "text": LAYOUT,
    }  # fmt: skip


def test_which_dimension_spans_the_pods() -> None:
    assert (
        Parallelism(8, 1, 1, 2).describe() == "TP 8 x PP 1 = 8 devices, 4 per pod: TP across 2 pods per stage"
    )
    assert Parallelism(4, 4, 1, 2).describe().endswith("PP across 2 pods (2 stages per pod)")
    assert Parallelism(2, 2, 1, 1).describe() == "TP 2 x PP 2 = 4 devices in one pod"
    assert Parallelism(1, 1, 4, 4).spans_pods == "data"
    assert Parallelism(2, 2, 4, 4).devices_per_pod == 16  # each local DP rank has TP x PP devices


def _refusal(kind: str, **pool: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        prefill_recipe(kind, **pool)
    (problem,) = caught.value.problems
    return problem.message


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_tp_16_and_pp_2_on_two_pods_of_8_is_refused(kind: str) -> None:
    message = _refusal(kind, tensor_parallel=16)
    assert "gpus_per_node is 8, but TP 16 x PP 2 needs 16 per pod (32 over 2 pods)" in message


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_tp_group_that_would_split_a_pod_is_refused(kind: str) -> None:
    """12 devices over 2 pods is 6 a pod: a TP group of 4 neither fits in one nor spans whole pods."""
    message = _refusal(kind, tensor_parallel=4, pipeline_parallel=3, gpus_per_node=None)
    assert message.endswith(
        "TP 4 x PP 3 over 2 pods puts 6 devices in a pod, so a TP group of 4 would split a pod; make TP "
        "divide or be a multiple of 6"
    )
    assert "cannot be split evenly over 2 pods" in _refusal(kind, tensor_parallel=3, pipeline_parallel=1)


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_tp_8_over_two_pods_of_8_says_what_was_likely_meant(kind: str) -> None:
    """Was: "gpus_per_node is 8 but the pool needs 4 (TP 8 over 2 pods)", which hid the layout."""
    message = _refusal(kind, pipeline_parallel=None)
    assert message.endswith(
        "gpus_per_node is 8, but TP 8 x PP 1 needs 4 per pod (8 over 2 pods); for TP 8 within each pod "
        "and the pods as pipeline stages, set pipeline_parallel: 2"
    )
    assert "needs 4 (TP 8 over 2 pods)" not in message


PP_IN_ARGS = {
    "vllm": ("pipeline-parallel-size", "pp"),
    "sglang": ("pp-size", "pipeline-parallel-size"),
}


@pytest.mark.parametrize(
    ("kind", "flag"), [(k, f) for k, flags in PP_IN_ARGS.items() for f in flags], ids=lambda v: str(v)
)
def test_pipeline_parallel_in_args_on_a_one_gpu_pod_is_refused(kind: str, flag: str, tmp_path: Path) -> None:
    """Was planned rc 0: a 1-GPU pod told to run 2 pipeline stages."""
    recipe = prefill_recipe(kind, nodes=1, gpus_per_node=1, tensor_parallel=None, pipeline_parallel=None,
                            args={**prefill_recipe(kind).pools["prefill"].args, flag: 2})  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        build_plan(pod(0).model_copy(update={"group_size": 1, "leader_address": None}), recipe)
    (problem,) = caught.value.problems
    assert f"pools.prefill.args.{flag} is derived by the launcher" in problem.message
    assert problem.fix == "set the pool's pipeline_parallel in the recipe"


def test_pipeline_parallel_in_extra_args_is_refused() -> None:
    settings = pod(0).model_copy(update={"extra_args": "-pp 2"})
    with pytest.raises(ConfigError) as caught:
        build_plan(settings, prefill_recipe("vllm"))
    assert "-pp is derived by the launcher" in caught.value.problems[0].message


def test_the_pod_s_devices_are_counted_with_pp() -> None:
    """LLMD_GPUS_PER_NODE (the pod's accelerator request) against TP x PP / nodes."""
    with pytest.raises(ConfigError) as caught:
        build_plan(
            pod(0).model_copy(update={"gpus_per_node": 16}), prefill_recipe("vllm", gpus_per_node=None)
        )
    (problem,) = caught.value.problems
    assert problem.setting == "LLMD_GPUS_PER_NODE"
    assert problem.message == "is 16, but pool prefill: TP 8 x PP 2 needs 8 per pod (16 over 2 pods)"
    build_plan(pod(0).model_copy(update={"gpus_per_node": 8}), prefill_recipe("vllm", gpus_per_node=None))
