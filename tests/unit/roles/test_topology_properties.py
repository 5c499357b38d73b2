"""Property tests over group sizes, local DP sizes and worker indices, read back from the argv."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.config.recipe_file import RecipeSource, validate_recipe
from launcher.config.settings import Settings
from roles import build_plan
from roles.args import flag_values
from roles.group import (
    check_agreement,
    check_group_ports,
    check_kv_events,
    check_ranks,
    plan_group,
)


def dp_recipe(nodes: int, local: int, kv_port: int = 5557) -> Any:
    return validate_recipe(
        {
            "name": "dp",
            "model": {"path": "m"},
            "default_pool": "decode",
            "pools": {
                "decode": {
                    "kind": "vllm",
                    "layout": "data-parallel",
                    "nodes": nodes,
                    "data_parallel_local": local,
                    "port": 8200,
                    "supervisor_port": 9208,
                    "dp_rpc_port": 5555,
                    "kv_events": {"port": kv_port, "replay_port": kv_port + 100},
                    "nixl": {"side_channel_port": 15600},
                    "disagg_sidecar": {"port": 8000},
                }
            },
        },
        RecipeSource("test", None),
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(nodes=st.integers(1, 12), local=st.integers(2, 8), data=st.data())
def test_dp_ranks_cover_group_once_and_kv_events_land_on_base_plus_local_rank(
    nodes: int, local: int, data: st.DataObject
) -> None:
    recipe = dp_recipe(nodes, local)
    report = plan_group(Settings(leader_address="l-0.l", pod_ip="10.0.0.1"), recipe)
    assert report.ok, report.checks
    owned: list[int] = []
    for plan in report.plans:
        argv = plan.engine.argv
        start = int(flag_values(argv, "--data-parallel-start-rank")[0])
        owned += range(start, start + int(flag_values(argv, "--data-parallel-size-local")[0]))
        # vLLM publishes global rank r on (endpoint port) + r: local rank l must land on 5557 + l.
        config = json.loads(flag_values(argv, "--kv-events-config")[0])
        base = int(config["endpoint"].rsplit(":", 1)[1])
        replay = int(config["replay_endpoint"].rsplit(":", 1)[1])
        for local_rank in range(local):
            assert base + start + local_rank == 5557 + local_rank
            assert replay + start + local_rank == 5657 + local_rank
        ports = [p.number for _, p in plan.ports]
        assert len(ports) == len(set(ports))  # nothing collides inside a pod
    assert sorted(owned) == list(range(nodes * local))

    index = data.draw(st.integers(0, nodes - 1))
    plan = build_plan(Settings(leader_address="l-0.l", group_size=nodes, worker_index=index), recipe)
    assert plan.role.dp_ranks == range(index * local, (index + 1) * local)


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 8), tp_per_node=st.integers(1, 8))
def test_node_ranks_cover_group_once(nodes: int, tp_per_node: int) -> None:
    recipe = validate_recipe(
        {
            "name": "tp",
            "model": {"path": "m"},
            "default_pool": "p",
            "pools": {"p": {"kind": "vllm", "nodes": nodes, "tensor_parallel": nodes * tp_per_node,
                            "kv_events": {}, "render": {}}},
        },
        RecipeSource("test", None),
    )  # fmt: skip
    report = plan_group(Settings(), recipe)
    assert report.ok, report.checks
    assert [plan.role.kind.value for plan in report.plans] == ["leader"] + ["worker"] * (nodes - 1)
    headless = ["--headless" in plan.engine.argv for plan in report.plans]
    assert headless == [False] + [True] * (nodes - 1)
    assert [len(plan.processes) for plan in report.plans] == [2] + [1] * (nodes - 1)  # render on the leader


def test_group_checks_fail_on_a_broken_group() -> None:
    """The checks read argv, so a group whose pods disagree or collide is caught."""
    recipe = dp_recipe(2, 2)
    good = plan_group(Settings(leader_address="l"), recipe).plans
    # Both pods claiming the same ranks: as if LWS_WORKER_INDEX were wrong on one of them.
    doubled = (good[0], good[0])
    assert not check_ranks(doubled).ok and "doubled [0, 1]" in check_ranks(doubled).detail
    # A pool whose KV events collide with the sidecar: the ports check names both.
    clash = validate_recipe(
        {**dp_recipe(2, 2).model_dump(), "pools": {"decode": {
            **dp_recipe(2, 2).pools["decode"].model_dump(), "kv_events": {"port": 8001}}}},
        RecipeSource("test", None),
    )  # fmt: skip
    ports = check_group_ports(plan_group(Settings(leader_address="l"), clash).plans)
    assert not ports.ok and "8001 is both" in ports.detail
    # Pods whose first ranks publish on different ports (uncompensated base).
    # Pods naming different leaders: the agreement check names the flag and the pods.
    split = (good[0], _with_flag(good[1], "--data-parallel-address", "other-leader"))
    agreement = check_agreement(split)
    assert (
        not agreement.ok
        and "--data-parallel-address: pod 0=('l',), pod 1=('other-leader',)" in agreement.detail
    )
    recompute = plan_group(Settings(leader_address="l"), recipe).plans
    assert check_kv_events(recompute).ok
    assert not check_kv_events((recompute[0], _with_endpoint(recompute[1], "tcp://*:5557"))).ok


def _with_flag(plan: Any, flag: str, value: str) -> Any:
    from dataclasses import replace

    argv = list(plan.engine.argv)
    argv[argv.index(flag) + 1] = value
    return replace(plan, processes=(replace(plan.engine, argv=tuple(argv)), *plan.processes[1:]))


def _with_endpoint(plan: Any, endpoint: str) -> Any:
    from dataclasses import replace

    argv = list(plan.engine.argv)
    i = argv.index("--kv-events-config") + 1
    argv[i] = json.dumps({**json.loads(argv[i]), "endpoint": endpoint})
    return replace(plan, processes=(replace(plan.engine, argv=tuple(argv)), *plan.processes[1:]))
