"""Which process owns a TCP socket of a pod. A process's /proc/<pid>/net/tcp is the table of ITS network
namespace (the pod's), and a socket's inode names it in the owner's /proc/<pid>/fd; psutil's own
connection listing reads the caller's namespace, so it cannot see a pod's sockets."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN
ESTABLISHED = "01"


@dataclass(frozen=True)
class TcpSocket:
    local: tuple[str, int]
    remote: tuple[str, int]
    state: str  # the kernel's hex state code
    inode: int


def _address(field: str) -> tuple[str, int]:
    """`0100000A:1F40` (IPv4, little-endian host bytes) or the IPv6 form, to (ip, port)."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    # The kernel prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def tcp_sockets(pid: int) -> list[TcpSocket]:
    """Every TCP socket of the network namespace `pid` lives in."""
    found = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            found.append(TcpSocket(_address(fields[1]), _address(fields[2]), fields[3], int(fields[9])))
    return found


def socket_inodes(proc: psutil.Process) -> set[int]:
    """The inodes of the sockets `proc` holds open."""
    inodes = set()
    fds = Path(f"/proc/{proc.pid}/fd")
    for fd in os.listdir(fds):
        try:
            target = os.readlink(fds / fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def listener(pid: int, port: int) -> TcpSocket | None:
    """The socket listening on `port` in the network namespace of `pid`."""
    return next((s for s in tcp_sockets(pid) if s.state == LISTEN and s.local[1] == port), None)


def owners(inode: int, procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` that hold the socket `inode`."""
    return [proc for proc in procs if inode in socket_inodes(proc)]
