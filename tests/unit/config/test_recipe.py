"""launcher/config/recipe.py: recipes as data (built-in and mounted files), the `launcher:` section,
extra args and env merged into the plan, and plans that depend on nothing but their inputs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, load_recipe
from launcher.contract.errors import ConfigError
from tests.unit.user_recipe import USER_RECIPE, engine


def test_recipe_file_launcher_section_is_validated(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(USER_RECIPE.replace("gpus_per_node: 1", "gpus_per_node: 2"))
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    assert code == 2 and "LLMD_GPUS_PER_NODE: is 2 but pool serve needs 1" in err


def test_user_recipe_single_pod(plan_json: Any, user_recipe: str) -> None:
    plan = plan_json(env={"LLMD_RECIPE_FILE": user_recipe, "POD_IP": "10.0.0.7"})
    assert plan["recipe"] == "tiny" and plan["role"]["name"] == "serve-leader"
    assert engine(plan)["argv"][:9] == [
        "vllm", "serve", "/models/tiny", "--served-model-name", "tiny", "--port", "9000",
        "--shutdown-timeout", "12",  # grace 30 s less the 5 s deregistration delay
    ]  # fmt: skip
    assert "--nnodes" not in engine(plan)["argv"]  # one pod: no multi-node flags
    assert "--max-model-len" in engine(plan)["argv"]
    assert '"topic":"kv@10.0.0.7:9000@tiny"' in " ".join(engine(plan)["argv"])


def test_recipe_name_must_match_file(run_cli: Any, user_recipe: str) -> None:
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": user_recipe, "LLMD_RECIPE": "kimi-k3.1-pro"})
    assert code == 2 and "LLMD_RECIPE" in err and "'tiny'" in err


def test_builtin_recipes_are_data_for_more_than_kimi() -> None:
    assert builtin_recipe_names() == [
        "kimi-k3.1-pro",
        "optimized-baseline-cpu-vllm",
        "optimized-baseline-gpu-sglang",
        "optimized-baseline-gpu-vllm",
        "optimized-baseline-tpu-v7-vllm",
        "pd-disaggregation-gpu-sglang",
        "pd-disaggregation-gpu-vllm",
        "precise-prefix-cache-routing-cpu-vllm",
        "precise-prefix-cache-routing-gpu-sglang",
        "precise-prefix-cache-routing-gpu-vllm",
        "tiered-prefix-cache-gpu-vllm",
        "vllm-single-pod",
        "wide-ep-deepseek-v4",
    ]
    single = load_recipe(RecipeSource("vllm-single-pod", None))
    assert list(single.pools) == ["serve"] and single.model.path == "Qwen/Qwen3-0.6B"


def test_recipes_command(run_cli: Any) -> None:
    code, out, _ = run_cli("recipes")
    assert code == 0
    # One line each: the guide it follows, its accelerator, its engines, then its pools.
    assert "kimi-k3.1-pro: guide kimi-k3-1, nvidia-gb300, tpu-7x; vllm, sglang, mooncake-master" in out
    assert "optimized-baseline-cpu-vllm: guide optimized-baseline, cpu; vllm | pools: decode (vllm)\n" in out
    assert "vllm-single-pod: no llm-d guide; vllm | pools: serve (vllm)\n" in out


def test_extra_args_replace_recipe_flags_and_are_appended_last(plan_json: Any) -> None:
    plan = plan_json(env={"LLMD_EXTRA_ARGS": "--max-num-seqs 64 --no-enable-prefix-caching --seed=7"})
    argv = engine(plan)["argv"]
    assert argv[-4:] == ["--max-num-seqs", "64", "--no-enable-prefix-caching", "--seed=7"]
    assert argv.count("--max-num-seqs") == 1 and "--enable-prefix-caching" not in argv
    assert "LLMD_EXTRA_ARGS: --max-num-seqs 64 replaces --max-num-seqs 32" in plan["notes"]


def test_extra_env_reaches_every_process_and_overrides(plan_json: Any) -> None:
    # (PYTHONHASHSEED, which this test overrode before, is one a pool that exchanges KV must share
    # with its peers: tests/unit/roles/test_kv_transfer.py; HF_HUB_OFFLINE is the recipe's too.)
    plan = plan_json("--env", "HF_HUB_OFFLINE=0", "--env", "VLLM_LOGGING_LEVEL=DEBUG")
    for process in plan["processes"]:
        assert process["env"]["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert engine(plan)["env"]["HF_HUB_OFFLINE"] == "0"


def test_ipv6_pod_and_leader_addresses_are_bracketed(plan_json: Any) -> None:
    plan = plan_json(env={"LLMD_POOL": "tpu", "LWS_LEADER_ADDRESS": "fd00::1", "LWS_GROUP_SIZE": "4",
                          "LWS_WORKER_INDEX": "1", "POD_IP": "fd00::2"})  # fmt: skip
    assert "[fd00::1]:20000" in engine(plan)["argv"]
    prefill = plan_json(env={"LWS_LEADER_ADDRESS": "fd00::1", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0",
                             "POD_IP": "fd00::2"})  # fmt: skip
    assert '"topic":"kv@[fd00::2]:8000@moonshotai/Kimi-K3.1-Pro"' in " ".join(engine(prefill)["argv"])


def test_plans_do_not_depend_on_hash_seed_or_process() -> None:
    """Byte-identical output from separate processes with different PYTHONHASHSEED."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "LWS_LEADER_ADDRESS": "d-0.d", "LWS_GROUP_SIZE": "4",
           "LWS_WORKER_INDEX": "2", "POD_IP": "10.0.0.3", "LLMD_POOL": "decode"}  # fmt: skip
    outputs = {
        subprocess.run(
            [sys.executable, "-m", "launcher", "plan", "--group", "--format", "json"],
            env={**env, "PYTHONHASHSEED": seed},
            capture_output=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1


@pytest.mark.parametrize(
    ("block", "refused"),
    [(128, False), ("128", False), (" 128", False), (64, True), ("64", True), ("128.0", True), (True, True)],
    ids=repr,
)
def test_the_router_block_size_is_compared_as_the_engine_reads_it(block: object, refused: bool) -> None:
    """The flag's argv token is what the engine parses (argparse type=int): `page-size: "128"` is 128,
    not a mismatch "128 but 128" (issue #24 item 18)."""
    from launcher.config.recipe_file import RecipeSource, read_recipe, validate_recipe

    source = RecipeSource("kimi-k3.1-pro", None)
    data = dict(read_recipe(source))
    pools = dict(data["pools"])
    assert pools["tpu"]["router"]["block_size_tokens"] == 128
    pools["tpu"] = {**pools["tpu"], "args": {**pools["tpu"]["args"], "page-size": block}}
    if refused:
        with pytest.raises(ConfigError, match=re.escape("blockSizeTokens is 128 but args.page-size is")):
            validate_recipe({**data, "pools": pools}, source)
    else:
        validate_recipe({**data, "pools": pools}, source)


@pytest.mark.parametrize(
    ("donor", "prefill", "refused"),
    [("rdma", "rdma", False), ("tcp", "rdma", True), ("tcp", None, True), ("tcp", "tcp", True)],
)
def test_the_pools_of_one_mooncake_store_share_its_protocol(
    donor: str, prefill: str | None, refused: bool
) -> None:
    """A donor's segment is reachable only over its own protocol (Mooncake's store client installs one
    transport): a TCP donor beside RDMA engines, or beside vLLM's default (rdma), is refused; the
    decode pool stays rdma in every case, so a tcp prefill is refused too."""
    from launcher.config.recipe_file import RecipeSource, read_recipe, validate_recipe

    source = RecipeSource("kimi-k3.1-pro", None)
    data = dict(read_recipe(source))
    pools = dict(data["pools"])
    pools["mooncake-donor"] = {**pools["mooncake-donor"], "protocol": donor}
    store = dict(pools["prefill"]["mooncake_store"]["config"])
    if prefill is None:
        del store["protocol"]
    else:
        store["protocol"] = prefill
    pools["prefill"] = {**pools["prefill"], "mooncake_store": {"config": store}}
    if refused:
        with pytest.raises(
            ConfigError, match=re.escape("the pools of the Mooncake store at mooncake-master:8700")
        ):
            validate_recipe({**data, "pools": pools}, source)
    else:
        validate_recipe({**data, "pools": pools}, source)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"supervisor_port": 8208}, "api_servers (vLLM's hybrid load balancing) and supervisor_port"),
        ({"api_servers": None}, "needs supervisor_port (vLLM's DP supervisor) or api_servers"),
        (
            {"layout": "multinode", "data_parallel_local": None, "tensor_parallel": 8, "nodes": 2},
            "api_servers belong to layout data-parallel",
        ),
    ],
    ids=["with-a-supervisor", "neither-across-pods", "multinode"],
)
def test_hybrid_load_balancing_is_one_data_parallel_mode(change: dict[str, object], message: str) -> None:
    """`api_servers` (--data-parallel-hybrid-lb, llm-d's wide-EP guides) is data: the DeepSeek-V4 recipe's
    decode pool, changed one way at a time, is refused naming the fields."""
    from launcher.config.recipe_file import RecipeSource, read_recipe, validate_recipe

    source = RecipeSource("wide-ep-deepseek-v4", None)
    data = dict(read_recipe(source))
    pools = dict(data["pools"])
    pools["decode"] = {k: v for k, v in {**pools["decode"], **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_recipe({**data, "pools": pools}, source)
    validate_recipe(data, source)  # the recipe as shipped is valid
