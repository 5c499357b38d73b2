"""The launcher's own lines on stderr (errors, notes). A closed or broken stderr (the container's log
pipe gone, a full disk) must not turn a bad input into a traceback, nor into exit 120, which is what
Python returns when its final flush of stderr fails. Standard library only: the exec probe uses it."""

from __future__ import annotations

import os
import sys


def say(line: str) -> None:
    """Write one line to stderr, or drop it when stderr cannot take it."""
    stream = sys.stderr
    if stream is None:  # fd 2 was closed when the interpreter started
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        silence()


def silence(fd: int = 2) -> None:
    """Point fd 2 (or stdout's 1) at /dev/null, so what is still buffered and every later write (the
    interpreter's last flush included) succeeds: the Python docs' recipe for a broken stdout (signal
    module, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    os.dup2(devnull, fd)
    os.close(devnull)
