"""`plan --group` (roles/group.py) with the env LWS really injects."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.roles.test_golden_kimi import TPU_LEADER, lws


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_plan_group_on_a_tpu_pod_plans_every_member(plan_json: Any, index: int) -> None:
    """LWS injects TPU_WORKER_ID (= this pod's index) and TPU_WORKER_HOSTNAMES on every TPU pod; the
    group is planned from any of them, each member with its own rank."""
    hosts = ",".join(
        f"kimi-k3-1-tpu-sglang-0{'-' + str(i) if i else ''}.kimi-k3-1-tpu-sglang" for i in range(4)
    )
    env = {**lws(TPU_LEADER, 4, index, f"10.64.3.{index}", "tpu"), "TPU_WORKER_ID": str(index),
           "TPU_WORKER_HOSTNAMES": hosts}  # fmt: skip
    group = plan_json("--group", env=env)
    assert group["ok"] is True
    assert [pod["role"]["worker_index"] for pod in group["pods"]] == [0, 1, 2, 3]


def test_a_tpu_id_that_disagrees_with_this_pods_index_is_still_refused(run_cli: Any) -> None:
    env = {**lws(TPU_LEADER, 4, 1, "10.64.3.1", "tpu"), "TPU_WORKER_ID": "2"}
    code, _, err = run_cli("plan", "--group", env=env)
    assert code == 2 and "TPU_WORKER_ID" in err
