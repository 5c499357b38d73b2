"""A STAND-IN sysfs tree with RDMA devices, for machines that have none (no kernel module here, not
even soft-RoCE). Laid out as the kernel's: Linux Documentation/ABI/stable/sysfs-class-infiniband
(class/infiniband/<dev>/ports/<n>/{state, link_layer, gids/<i>, gid_attrs/types/<i>,
gid_attrs/ndevs/<i>}, the device's PCI function with net/<netdev> and infiniband_verbs/uverbs<k>), and a
/dev with the verbs nodes the container was given."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def ipv4_gid(ip: str) -> str:
    """The RoCE v2 GID of an IPv4 address (::ffff:a.b.c.d), spelled as sysfs prints GIDs."""
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


@dataclass
class Port:
    state: str = "4: ACTIVE"
    link_layer: str = "Ethernet"
    gids: list[tuple[str, str, str]] = field(default_factory=list)  # (gid, type, ndev) by index


@dataclass
class Device:
    name: str
    uverbs: str  # its verbs node, uverbsN
    netdev: str | None = None
    ports: dict[int, Port] = field(default_factory=dict)
    in_container: bool = True  # /dev/infiniband/<uverbs> was given to the container


def make_tree(root: Path, devices: list[Device]) -> tuple[str, str]:
    """Writes root/sys and root/dev; returns (sysfs root, dev root)."""
    sys_root, dev_root = root / "sys", root / "dev"
    for device in devices:
        base = sys_root / "class" / "infiniband" / device.name
        pci = base / "device"
        (pci / "infiniband_verbs" / device.uverbs).mkdir(parents=True)
        if device.netdev:
            (pci / "net" / device.netdev).mkdir(parents=True)
        if device.in_container:
            (dev_root / "infiniband").mkdir(parents=True, exist_ok=True)
            (dev_root / "infiniband" / device.uverbs).write_text("")
        for number, port in device.ports.items():
            where = base / "ports" / str(number)
            for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
                (where / sub).mkdir(parents=True)
            (where / "state").write_text(port.state + "\n")
            (where / "link_layer").write_text(port.link_layer + "\n")
            for index, (gid, kind, ndev) in enumerate(port.gids):
                (where / "gids" / str(index)).write_text(gid + "\n")
                (where / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
                (where / "gid_attrs" / "ndevs" / str(index)).write_text(ndev + "\n")
    return str(sys_root), str(dev_root)


def roce(name: str, uverbs: str, netdev: str, ip: str, **kwargs: bool) -> Device:
    """A RoCE NIC as a GB300 node has eight of: index 0 and 1 link-local (v1, v2), 2 and 3 the IPv4
    address (v1, v2), an empty slot after them."""
    link_local = "fe80:0000:0000:0000:0a00:00ff:fe00:0001"
    gids = [
        (link_local, "IB/RoCE v1", netdev),
        (link_local, "RoCE v2", netdev),
        (ipv4_gid(ip), "IB/RoCE v1", netdev),
        (ipv4_gid(ip), "RoCE v2", netdev),
        (ZERO_GID, "", ""),
    ]
    return Device(name, uverbs, netdev, {1: Port(gids=gids)}, **kwargs)
