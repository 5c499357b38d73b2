"""Which RDMA ports does this pod have? NCCL, UCX (NIXL) and Mooncake's transfer engine otherwise
pick HCAs and the RoCE GID index themselves and, on a node whose NICs are shared out between pods
(GKE DRANET on GB300: 8 NICs, one claim per pod), pick ones the pod cannot use.

Read from sysfs as the kernel lays it out (Linux Documentation/ABI/stable/sysfs-class-infiniband):
  class/infiniband/<dev>/ports/<n>/state            "4: ACTIVE"
  class/infiniband/<dev>/ports/<n>/link_layer       "InfiniBand" | "Ethernet" (RoCE)
  class/infiniband/<dev>/ports/<n>/gids/<i>         the GID table (all zeros: an empty slot)
  class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>  "IB/RoCE v1" | "RoCE v2"
  class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/<i>  the netdev a RoCE GID belongs to
  class/infiniband/<dev>/device/net/<netdev>        the netdev of the same PCI function
  class/infiniband/<dev>/device/infiniband_verbs/uverbs<k>  its verbs device, /dev/infiniband/uverbs<k>
A device whose verbs node is not in the container's /dev is visible (the RDMA subsystem's shared
network-namespace mode shows every HCA of the node) but not the pod's: it is left out.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from launcher.contract.errors import Problem
from launcher.contract.plan import RdmaNeed, RdmaPort

ACTIVE = "4: ACTIVE"  # ib_port_state IB_PORT_ACTIVE, as the state file prints it
ROCE_V2 = "RoCE v2"


def rdma_ports(sysfs_root: str = "/sys", dev_root: str = "/dev") -> tuple[RdmaPort, ...]:
    """The active ports of the RDMA devices this container can open, sorted by device and port."""
    devices = Path(sysfs_root, "class", "infiniband")
    if not devices.is_dir():
        return ()
    found = []
    for device in sorted(devices.iterdir(), key=lambda d: d.name):
        if not _openable(device, Path(dev_root)):
            continue
        ports = device / "ports"
        if not ports.is_dir():
            continue
        for port in sorted((p for p in ports.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            if _read(port / "state") != ACTIVE:
                continue
            link = _read(port / "link_layer") or "InfiniBand"
            gid_index = _roce_v2_gid(port) if link == "Ethernet" else None
            netdev = _read(port / "gid_attrs" / "ndevs" / str(gid_index)) if gid_index is not None else None
            found.append(RdmaPort(device.name, int(port.name), link, netdev or _netdev(device), gid_index))
    return tuple(found)


def missing(need: RdmaNeed, sysfs_root: str) -> Problem:
    """A pool that cannot work without RDMA, on a pod without an active RDMA port it can open."""
    return Problem(
        "rdma",
        f"{need.required_by} needs an RDMA device, but this pod has no active RDMA port it can open "
        f"({sysfs_root}/class/infiniband with its /dev/infiniband/uverbs*)",
        need.fix,
    )


def _openable(device: Path, dev_root: Path) -> bool:
    verbs = device / "device" / "infiniband_verbs"
    names = [v.name for v in verbs.iterdir()] if verbs.is_dir() else []
    return any((dev_root / "infiniband" / name).exists() for name in names)


def _roce_v2_gid(port: Path) -> int | None:
    """The GID index RoCE v2 traffic must use: a RoCE v2 entry holding an IPv4-mapped address first
    (what routes across subnets, as KServe's KSERVE_INFER_ROCE picks it), else any RoCE v2 entry."""
    types = port / "gid_attrs" / "types"
    if not types.is_dir():
        return None
    candidates = []
    for entry in sorted((t for t in types.iterdir() if t.name.isdigit()), key=lambda t: int(t.name)):
        gid = _gid(port / "gids" / entry.name)
        if _read(entry) != ROCE_V2 or gid is None or gid.is_unspecified:
            continue
        ipv4_mapped = gid.ipv4_mapped is not None
        candidates.append((not ipv4_mapped, gid.is_link_local, int(entry.name)))
    return min(candidates)[2] if candidates else None


def _gid(path: Path) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(_read(path))
    except ValueError:
        return None


def _netdev(device: Path) -> str | None:
    net = device / "device" / "net"
    names = sorted(n.name for n in net.iterdir()) if net.is_dir() else []
    return names[0] if names else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:  # a missing attribute, or a GID slot the driver refuses to read (EINVAL)
        return ""
