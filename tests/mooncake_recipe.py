"""The Mooncake store recipe two tiers run for real (the engines tier on the host, the images tier in
its image): a master and a DRAM donor over TCP on loopback, 256 MB donated."""

from __future__ import annotations


def mooncake_recipe(
    rpc: int = 8700, metrics: int = 9003, metadata: int = 8080, donor_rpc: int = 50052, donor_http: int = 9300
) -> str:
    return (
        "name: mooncake-test\n"
        "model: {path: unused}\n"
        "default_pool: master\n"
        "pools:\n"
        "  master:\n"
        "    kind: mooncake-master\n"
        f"    port: {rpc}\n"
        f"    metrics_port: {metrics}\n"
        f"    http_metadata_port: {metadata}\n"
        "    args: {rpc_address: 127.0.0.1, metrics_host: 127.0.0.1}\n"
        "  donor:\n"
        "    kind: mooncake-donor\n"
        f"    master: 127.0.0.1:{rpc}\n"
        f"    metadata_server: http://127.0.0.1:{metadata}/metadata\n"
        "    protocol: tcp\n"
        "    global_segment_size: 256MB\n"
        f"    port: {donor_rpc}\n"
        f"    http_port: {donor_http}\n"
    )
