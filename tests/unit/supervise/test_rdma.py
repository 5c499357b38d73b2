"""The pod's RDMA ports, read from a stand-in sysfs tree laid out as the kernel's
(tests/unit/supervise/rdma_sysfs.py), and the refusal of a pool that needs RDMA on a pod with none."""

from __future__ import annotations

from pathlib import Path

from launcher.config.recipe import Pool, Recipe
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.plan import RdmaPort
from launcher.supervise.host import check_host
from launcher.supervise.host.rdma import rdma_ports
from roles import build_plan
from tests.unit.supervise.rdma_sysfs import Device, Port, ipv4_gid, make_tree, roce

KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))


def test_the_active_ports_the_container_can_open_with_their_roce_v2_gid(tmp_path: Path) -> None:
    sysfs, dev = make_tree(
        tmp_path,
        [
            roce("mlx5_0", "uverbs0", "eth1", "10.1.0.5"),
            roce("mlx5_1", "uverbs1", "eth2", "10.2.0.5"),
            roce("mlx5_2", "uverbs2", "eth3", "10.3.0.5", in_container=False),  # another pod's NIC
            Device("mlx5_3", "uverbs3", "eth4", {1: Port(state="1: DOWN")}),
        ],
    )
    assert rdma_ports(sysfs, dev) == (
        RdmaPort("mlx5_0", 1, "Ethernet", "eth1", 3),  # index 3: RoCE v2 on the IPv4 address
        RdmaPort("mlx5_1", 1, "Ethernet", "eth2", 3),
    )


def test_an_infiniband_port_has_no_gid_index_and_a_v2_link_local_gid_is_the_last_choice(
    tmp_path: Path,
) -> None:
    link_local = "fe80:0000:0000:0000:0a00:00ff:fe00:0009"
    sysfs, dev = make_tree(
        tmp_path,
        [
            Device(
                "mlx5_0",
                "uverbs0",
                "ib0",
                {1: Port(link_layer="InfiniBand", gids=[(link_local, "IB/RoCE v1", "")])},
            ),
            Device("mlx5_1", "uverbs1", "eth9", {1: Port(gids=[(link_local, "RoCE v2", "eth9")])}),
            Device("mlx5_2", "uverbs2", None, {2: Port(gids=[(ipv4_gid("10.0.0.1"), "IB/RoCE v1", "")])}),
        ],
    )
    assert rdma_ports(sysfs, dev) == (
        RdmaPort("mlx5_0", 1, "InfiniBand", "ib0", None),
        RdmaPort("mlx5_1", 1, "Ethernet", "eth9", 0),
        RdmaPort("mlx5_2", 2, "Ethernet", None, None),  # RoCE v1 only: no v2 index to name
    )


def test_no_infiniband_class_means_no_ports(tmp_path: Path) -> None:
    assert rdma_ports(str(tmp_path / "sys"), str(tmp_path / "dev")) == ()


def _with_donor(donor: Pool) -> Recipe:
    return KIMI.model_copy(update={"pools": {**KIMI.pools, "mooncake-donor": donor}})


def test_a_pool_that_needs_rdma_is_refused_on_a_pod_without_any(tmp_path: Path) -> None:
    for pool, needs, fix in [
        (
            "prefill",
            "pools.prefill.mooncake_store.config.protocol rdma",
            "mooncake_store.config.protocol to tcp",
        ),
        ("mooncake-donor", "pools.mooncake-donor.protocol rdma", "set pools.mooncake-donor.protocol to tcp"),
    ]:
        plan = build_plan(Settings(pool=pool, pod_ip="10.64.1.10"), KIMI)
        report = check_host(plan, "", str(tmp_path / "no-sys"))
        (problem,) = [p for p in report.problems if p.setting == "rdma"]
        assert problem.message.startswith(
            f"{needs} needs an RDMA device, but this pod has no active RDMA port"
        )
        assert fix in problem.fix and "RDMA NICs" in problem.fix
        assert report.rdma == ()


def test_a_pod_with_rdma_passes_and_reports_its_ports(tmp_path: Path) -> None:
    sysfs, dev = make_tree(tmp_path, [roce("mlx5_0", "uverbs0", "eth1", "10.1.0.5")])
    plan = build_plan(Settings(pool="mooncake-donor", pod_ip="10.64.1.10"), KIMI)
    report = check_host(plan, "", sysfs, dev)
    assert [p.setting for p in report.problems] == []
    assert [p.name for p in report.rdma] == ["mlx5_0:1"]


def test_a_tcp_pool_or_an_advisory_check_is_not_refused(tmp_path: Path) -> None:
    donor = KIMI.pools["mooncake-donor"]
    tcp = _with_donor(donor.model_copy(update={"protocol": "tcp"}))
    plan = build_plan(Settings(pool="mooncake-donor", pod_ip="10.64.1.10"), tcp)
    assert check_host(plan, "", str(tmp_path)).problems == []
    host = donor.host.model_copy(update={"advisory": ["rdma"]})
    plan = build_plan(
        Settings(pool="mooncake-donor", pod_ip="10.64.1.10"),
        _with_donor(donor.model_copy(update={"host": host})),
    )
    report = check_host(plan, "", str(tmp_path))
    assert report.problems == [] and [p.setting for p in report.warnings] == ["rdma"]
