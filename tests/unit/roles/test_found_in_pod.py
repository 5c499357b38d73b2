"""What only the running pod knows (the leader's IP, the interface that holds POD_IP) is filled in by
build_plan(found=...), in one place: the engine gets the IP and the interface; peers stay watched by
the leader's DNS name (a recreated pod keeps its name, not its IP)."""

from __future__ import annotations

from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.plan import IFNAME_PLACEHOLDER, TcpCheck
from roles import FoundInPod, build_plan
from tests.unit.roles.test_golden_kimi import PREFILL_LEADER

KIMI = load_recipe(RecipeSource("kimi-k3.1-pro", None))
LEADER_IP = "10.64.1.10"


def _worker() -> Settings:
    return Settings(
        leader_address=PREFILL_LEADER, group_size=2, worker_index=1, pod_ip="10.64.1.11", pool="prefill"
    )


def test_the_dry_run_shows_the_leaders_name_and_the_interface_placeholder() -> None:
    plan = build_plan(_worker(), KIMI)
    assert PREFILL_LEADER in " ".join(plan.engine.argv)
    assert plan.engine.env["NCCL_SOCKET_IFNAME"] == IFNAME_PLACEHOLDER


def test_the_pod_runs_the_leaders_ip_and_its_interface_and_watches_peers_by_name() -> None:
    plan = build_plan(_worker(), KIMI, found=FoundInPod(leader_ip=LEADER_IP, interface="eth7"))
    argv = " ".join(plan.engine.argv)
    assert LEADER_IP in argv and PREFILL_LEADER not in argv
    assert plan.role.leader_address == LEADER_IP
    assert plan.engine.env["NCCL_SOCKET_IFNAME"] == plan.engine.env["GLOO_SOCKET_IFNAME"] == "eth7"
    assert plan.probes is not None
    assert isinstance(plan.probes.started.request, TcpCheck) and plan.probes.started.request.host == LEADER_IP
    assert [(p.name, p.host) for p in plan.probes.peers] == [("leader", PREFILL_LEADER)]


def test_each_fact_is_filled_in_alone() -> None:
    only_ip = build_plan(_worker(), KIMI, found=FoundInPod(leader_ip=LEADER_IP))
    assert only_ip.engine.env["NCCL_SOCKET_IFNAME"] == IFNAME_PLACEHOLDER and LEADER_IP in only_ip.engine.argv
    only_nic = build_plan(_worker(), KIMI, found=FoundInPod(interface="eth7"))
    assert only_nic.engine.env["NCCL_SOCKET_IFNAME"] == "eth7" and PREFILL_LEADER in " ".join(
        only_nic.engine.argv
    )
