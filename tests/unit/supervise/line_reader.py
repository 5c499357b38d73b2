"""Bytes through a real pipe into a LineReader (launcher/supervise/logs.py), as a child's output
comes: written in 64 KiB pieces with reads between, then end of file. Returns the tail it kept."""

from __future__ import annotations

import os
from collections import deque

from launcher.supervise.logs import ChildOutput, LineReader


class Owner:
    name = "engine"

    def __init__(self) -> None:
        self.tail: deque[str] = deque(maxlen=40)


def read_through(data: bytes, output: ChildOutput) -> deque[str]:
    owner = Owner()
    read, write = os.pipe()
    os.set_blocking(read, False)
    pipe = open(read, "rb", buffering=0)  # noqa: SIM115 - closed below
    reader = LineReader(owner, "stderr", pipe, output, None)
    view = memoryview(data)
    while view:
        view = view[os.write(write, view[:65536]) :]
        while reader.read():
            pass
    os.close(write)
    while reader.read() is not False:
        pass
    reader.flush()
    pipe.close()
    return owner.tail
