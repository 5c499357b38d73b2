"""What P/D pods need to hand KV to each other, derived by the launcher (UCX's device on a pod without
RDMA, the NIXL side channel per global DP rank) or refused before anything starts (pools that disagree
on what makes a block the same block). The real transfer: tests/group/test_pd_group.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.config.recipe import Recipe
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.errors import ConfigError
from launcher.contract.plan import RdmaPort
from roles import FoundInPod, build_plan
from tests.unit.roles.test_golden_kimi import DECODE_LEADER, PREFILL_LEADER

KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))


def _decode(index: int, extra_env: dict[str, str] | None = None, extra_args: str = "") -> Settings:
    return Settings(
        leader_address=DECODE_LEADER, group_size=4, worker_index=index, pod_ip=f"10.64.2.{index}",
        pool="decode", extra_env=extra_env or {}, extra_args=extra_args,
    )  # fmt: skip


def _prefill() -> Settings:
    return Settings(leader_address=PREFILL_LEADER, group_size=2, worker_index=0, pod_ip="10.64.1.10")


def test_ucx_gets_the_socket_interface_only_where_the_pod_has_no_rdma_port() -> None:
    without = build_plan(_prefill(), KIMI, found=FoundInPod(interface="eth0"))
    assert without.engine.env["UCX_NET_DEVICES"] == "eth0"
    port = RdmaPort("mlx5_0", 1, "InfiniBand", "ib0", None)
    with_rdma = build_plan(_prefill(), KIMI, found=FoundInPod(interface="eth0", rdma=(port,)))
    assert with_rdma.engine.env["UCX_NET_DEVICES"] == "mlx5_0:1"
    for plan in (with_rdma, without):  # the transports stay UCX's choice: RDMA is never held to TCP
        assert not any(name == "UCX_TLS" for p in plan.processes for name in p.env)


def test_only_a_nixl_connector_gets_ucx_devices_and_the_recipes_own_value_wins() -> None:
    single = load_recipe(RecipeSource("vllm-single-pod", None))
    plan = build_plan(Settings(pod_ip="10.0.0.5"), single, found=FoundInPod(interface="eth0"))
    assert "UCX_NET_DEVICES" not in plan.engine.env
    pinned = build_plan(
        _decode(1, extra_env={"UCX_NET_DEVICES": "eth1"}), KIMI, found=FoundInPod(interface="eth0")
    )
    assert pinned.engine.env["UCX_NET_DEVICES"] == "eth1"
    decode = build_plan(_decode(1), KIMI, found=FoundInPod(interface="eth0"))
    assert decode.engine.env["UCX_NET_DEVICES"] == "eth0"
    assert "UCX_NET_DEVICES" not in decode.processes[1].env  # the sidecar runs no UCX


@pytest.mark.parametrize("index", range(4))
def test_each_decode_ranks_side_channel_is_the_port_vllm_binds_for_its_global_rank(index: int) -> None:
    """vLLM listens on VLLM_NIXL_SIDE_CHANNEL_PORT + the rank's data_parallel_index (vLLM 0.32.0
    vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py); with 4 local ranks, pod i
    owns global ranks 4i..4i+3, and the plan declares exactly those ports."""
    plan = build_plan(_decode(index), KIMI)
    argv = list(plan.engine.argv)
    start = int(argv[argv.index("--data-parallel-start-rank") + 1])
    local = int(argv[argv.index("--data-parallel-size-local") + 1])
    base = int(plan.engine.env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    bound = [base + rank for rank in range(start, start + local)]
    assert [p.number for p in plan.engine.ports if p.name.startswith("nixl-rank")] == bound
    assert bound == list(range(5600 + 4 * index, 5604 + 4 * index))
    assert plan.engine.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == f"10.64.2.{index}"


def _kimi_with(**changes: dict[str, object]) -> dict[str, object]:
    """The Kimi recipe's data with pool fields changed (pool -> {field: value})."""
    data = KIMI.model_dump(mode="json", exclude_unset=True)
    for pool, fields in changes.items():
        data["pools"][pool].update(fields)
    return data


@pytest.mark.parametrize(
    ("decode", "named"),
    [
        ({"env": {"PYTHONHASHSEED": "7"}}, "PYTHONHASHSEED (pools.prefill: '42', pools.decode: '7')"),
        ({"env": {}}, "PYTHONHASHSEED (pools.prefill: '42', pools.decode: unset)"),
        ({"args": {"block-size": 64}}, "args.block-size (pools.prefill: unset, pools.decode: 64)"),
        ({"model": {"path": "/other/Kimi-K3.1-Pro"}}, "model.path"),
    ],
)
def test_pools_that_exchange_kv_and_disagree_are_refused_when_the_recipe_loads(
    decode: dict[str, object], named: str
) -> None:
    Recipe.model_validate(_kimi_with())  # the guide's own recipe agrees with itself
    with pytest.raises(ValueError, match="the pools that exchange KV disagree on") as caught:
        Recipe.model_validate(_kimi_with(decode=decode))
    assert named in str(caught.value)


def test_a_pool_outside_the_exchange_may_differ() -> None:
    data = _kimi_with(tpu={"env": {"PYTHONHASHSEED": "7"}})
    assert Recipe.model_validate(data).pools["tpu"]


def test_one_pods_extra_env_or_args_cannot_change_what_its_peers_must_share() -> None:
    with pytest.raises(ConfigError, match="LLMD_EXTRA_ENV: sets PYTHONHASHSEED"):
        build_plan(_decode(0, extra_env={"PYTHONHASHSEED": "7"}), KIMI)
    with pytest.raises(ConfigError, match="LLMD_EXTRA_ARGS: --block-size"):
        build_plan(_decode(0, extra_args="--block-size 64"), KIMI)
    # A pool that exchanges no KV keeps both.
    single = load_recipe(RecipeSource("vllm-single-pod", None))
    build_plan(Settings(extra_env={"PYTHONHASHSEED": "7"}, extra_args="--block-size 64"), single)


def test_the_recipe_file_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(_kimi_with(decode={"env": {"PYTHONHASHSEED": "7"}})))
    with pytest.raises(ConfigError) as caught:
        load_recipe(RecipeSource("tiny", str(path)))
    assert "disagree on PYTHONHASHSEED" in str(caught.value)
