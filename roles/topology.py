"""LWS group arithmetic and per-rank ports: the only place ranks and port offsets are computed."""

from __future__ import annotations


def dp_size(group_size: int, dp_local: int) -> int:
    return group_size * dp_local


def dp_rank_range(worker_index: int, dp_local: int) -> range:
    """A pod owns the contiguous DP ranks [i*local, (i+1)*local)."""
    return range(worker_index * dp_local, (worker_index + 1) * dp_local)


def local_rank_ports(first: int, local_ranks: int) -> range:
    """Ports a pod serves per local rank: the first rank on `first`, local rank l on first + l."""
    return range(first, first + local_ranks)


def global_rank_ports(base: int, ranks: range) -> list[int]:
    """Ports vLLM offsets by the global DP rank (e.g. the NIXL side channel: base + r)."""
    return [base + r for r in ranks]


def kv_events_base_port(port: int, start_rank: int) -> int:
    """vLLM publishes rank r on base + r (global rank); base = port - start puts local rank l on port + l."""
    return port - start_rank
