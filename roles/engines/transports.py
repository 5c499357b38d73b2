"""What the transports under the engines read from their env: gloo and NCCL (collectives) and UCX (NIXL's
KV transfers), shared by every engine family that runs them (roles/needs.py fills them in)."""

from __future__ import annotations

from collections.abc import Sequence

from launcher.contract.plan import RdmaPort
from roles.engines.mooncake import MOONCAKE_GID_ENV

# Interface variables gloo and NCCL read.
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
# NIXL moves KV over UCX (nixl 1.5.1 bundles UCX 1.23), which reads its devices from UCX_NET_DEVICES.
UCX_MODULE = "nixl"
UCX_DEVICES_VAR = "UCX_NET_DEVICES"
# What names the RDMA ports an engine's collectives and NIXL use: NCCL's IB transport and UCX.
ENGINE_RDMA_VARS = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", UCX_DEVICES_VAR, "UCX_IB_GID_INDEX")


def rdma_values(ports: Sequence[RdmaPort]) -> dict[str, str]:
    """The RDMA variables for these ports. NCCL's `=` takes the names exactly (not as prefixes: mlx5_1
    would also match mlx5_10). One GID index serves every port, so it is set only when all RoCE ports
    agree (and no port is InfiniBand, where the index is not a RoCE choice)."""
    names = ",".join(p.name for p in ports)
    values = {"NCCL_IB_HCA": f"={names}", UCX_DEVICES_VAR: names}
    gids = {p.gid_index for p in ports}
    if all(p.link_layer == "Ethernet" for p in ports) and len(gids) == 1 and None not in gids:
        index = str(gids.pop())
        values |= {"NCCL_IB_GID_INDEX": index, "UCX_IB_GID_INDEX": index}
        values |= dict.fromkeys(MOONCAKE_GID_ENV, index)
    return values
