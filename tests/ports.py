"""Ports for test servers, chosen so nothing else on the machine can be handed them meanwhile.

Binding port 0 returns a port from the kernel's ephemeral range (net.ipv4.ip_local_port_range,
32768-60999 by default), and that port goes back to the pool the moment the probe socket closes:
any outgoing connection, in this process or another xdist worker, may be given it before the
server under test binds it, and port + 1 (a second data-parallel rank) was never reserved at all.
So ports come from below that range instead, where the kernel never assigns on its own, from a
slice of it owned by this xdist worker, and are never handed out twice in one process.
"""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32000  # below the default ephemeral range
_SLICES = 8  # xdist workers gw0..gw7 each own one slice; more workers share by modulo
_handed_out: set[int] = set()


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    size = (_HIGH - _LOW) // _SLICES
    return range(_LOW + index * size, _LOW + (index + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(span: int = 1) -> int:
    """The first of `span` consecutive ports on 127.0.0.1 that bind now and were not handed out before."""
    ports = _worker_slice()
    start = random.randrange(ports.start, ports.stop - span)  # separate pytest runs start apart
    for offset in range(len(ports)):
        base = ports.start + (start - ports.start + offset) % (len(ports) - span)
        wanted = range(base, base + span)
        if _handed_out.isdisjoint(wanted) and all(_bindable(p) for p in wanted):
            _handed_out.update(wanted)
            return base
    raise RuntimeError(f"no {span} consecutive free ports in {ports.start}..{ports.stop - 1}")
