"""The RDMA ports preflight found are named in the plan as spawned (build_plan(found=...)): NCCL's and
UCX's device lists, one RoCE GID index, a Mooncake store file's device_name and a donor's
--device_names; whatever the recipe set wins, and a pod with no port gets nothing (no transport is
forced)."""

from __future__ import annotations

import json

from launcher.config.recipe import Pool, Recipe
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.plan import Plan, RdmaPort
from roles import FoundInPod, build_plan

KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))
TWO_ROCE = (RdmaPort("mlx5_0", 1, "Ethernet", "eth1", 3), RdmaPort("mlx5_1", 1, "Ethernet", "eth2", 3))
RDMA_VARS = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "UCX_NET_DEVICES", "UCX_IB_GID_INDEX", "MC_GID_INDEX")


def _plan(pool: str, recipe: Recipe = KIMI, ports: tuple[RdmaPort, ...] = ()) -> Plan:
    return build_plan(Settings(pool=pool, pod_ip="10.64.1.10"), recipe, found=FoundInPod(rdma=ports))


def _store(plan: Plan) -> dict[str, object]:
    (store,) = [f for f in plan.files if f.path == plan.engine.env["MOONCAKE_CONFIG_PATH"]]
    return dict(json.loads(store.content))


def test_an_engine_names_the_pods_ports_for_nccl_ucx_and_its_store() -> None:
    plan = _plan("prefill", ports=TWO_ROCE)
    env = plan.engine.env
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"  # exact names: mlx5_1 must not match mlx5_10
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert env["NCCL_IB_GID_INDEX"] == env["UCX_IB_GID_INDEX"] == env["MC_GID_INDEX"] == "3"
    assert _store(plan)["device_name"] == "mlx5_0,mlx5_1"
    assert "UCX_TLS" not in env


def test_no_port_no_rdma_variable_and_the_dry_run_leaves_them_out() -> None:
    for plan in (_plan("prefill"), _plan("prefill", ports=())):
        assert not set(RDMA_VARS) & set(plan.engine.env)
        assert _store(plan)["device_name"] == ""
        assert plan.needs.rdma is not None and plan.needs.rdma.required_by is not None


def test_the_recipe_wins_and_ports_that_disagree_on_the_gid_get_no_index() -> None:
    prefill = KIMI.pools["prefill"]
    config = {**prefill.mooncake_store.config, "device_name": "mlx5_7"}  # type: ignore[union-attr]
    store = prefill.mooncake_store.model_copy(update={"config": config})  # type: ignore[union-attr]
    pool = prefill.model_copy(
        update={"env": {**prefill.env, "NCCL_IB_HCA": "mlx5_7"}, "mooncake_store": store}
    )
    mixed = (TWO_ROCE[0], RdmaPort("mlx5_1", 1, "Ethernet", "eth2", 1))
    plan = _plan("prefill", _with("prefill", pool), mixed)
    assert plan.engine.env["NCCL_IB_HCA"] == "mlx5_7" and _store(plan)["device_name"] == "mlx5_7"
    assert plan.engine.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert not {"NCCL_IB_GID_INDEX", "UCX_IB_GID_INDEX", "MC_GID_INDEX"} & set(plan.engine.env)


def test_infiniband_ports_get_device_lists_but_no_gid_index() -> None:
    plan = _plan("decode", ports=(RdmaPort("mlx5_0", 1, "InfiniBand", "ib0", None),))
    assert plan.engine.env["NCCL_IB_HCA"] == "=mlx5_0:1" and "NCCL_IB_GID_INDEX" not in plan.engine.env


def test_a_donor_names_its_devices_unless_the_recipe_did() -> None:
    plan = _plan("mooncake-donor", ports=TWO_ROCE)
    assert "--device_names=mlx5_0,mlx5_1" in plan.engine.argv and plan.engine.env["MC_GID_INDEX"] == "3"
    assert "NCCL_IB_HCA" not in plan.engine.env  # no collectives in a donor
    assert "--device_names=" in _plan("mooncake-donor").engine.argv
    donor = KIMI.pools["mooncake-donor"].model_copy(update={"device_names": "mlx5_5"})
    named = _plan("mooncake-donor", _with("mooncake-donor", donor), TWO_ROCE)
    assert "--device_names=mlx5_5" in named.engine.argv


def test_what_needs_rdma() -> None:
    assert _plan("mooncake-master").needs.rdma is None
    tpu = _plan("tpu").needs.rdma
    assert tpu is not None and tpu.required_by is None  # NCCL falls back to sockets: named, not required
    donor = KIMI.pools["mooncake-donor"].model_copy(update={"protocol": "tcp"})
    tcp = _plan("mooncake-donor", _with("mooncake-donor", donor)).needs.rdma
    assert tcp is not None and tcp.required_by is None


def _with(name: str, pool: Pool) -> Recipe:
    return KIMI.model_copy(update={"pools": {**KIMI.pools, name: pool}})
