"""roles/topology.py: the group arithmetic, by example (the properties, read back from the argv, are in
test_topology_properties.py)."""

from __future__ import annotations

from launcher.contract.addresses import host_port
from roles import topology


def test_decode_pod_3_of_the_kimi_group() -> None:
    assert topology.dp_size(4, 4) == 16
    assert topology.dp_rank_range(3, 4) == range(12, 16)
    # vLLM adds the global rank: base 5557 - 12 puts ranks 12..15 on 5557..5560.
    base = topology.kv_events_base_port(5557, 12)
    assert [base + r for r in range(12, 16)] == [5557, 5558, 5559, 5560]
    assert list(topology.local_rank_ports(8200, 4)) == [8200, 8201, 8202, 8203]
    assert topology.global_rank_ports(5600, range(12, 16)) == [5612, 5613, 5614, 5615]


def test_host_port_brackets_ipv6_only() -> None:
    assert host_port("10.0.0.1", 20000) == "10.0.0.1:20000"
    assert host_port("fd00::1", 20000) == "[fd00::1]:20000"
    assert host_port("leader-0.lws.ns", 20000) == "leader-0.lws.ns:20000"
