"""The launcher's own lines on stderr (errors, notes). A closed or broken stderr (the container's log
pipe gone, a full disk) must not turn a bad input into a traceback, nor into exit 120, which is what
Python returns when its final flush of stderr fails. Standard library only: the exec probe uses it."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

LAUNCHER = "llm-d-launcher"  # the `process` of the launcher's own lines


def wants_json(log_format: str, stream: TextIO | None = None) -> bool:
    """LLMD_LOG_FORMAT; auto: JSON where a machine reads the logs (a pod), console text on a terminal."""
    if log_format == "auto":
        stream = stream or sys.stderr
        return stream is None or not stream.isatty()  # None: fd 2 was closed at start
    return log_format == "json"


def json_head(process: str, severity: str, message: str) -> dict[str, Any]:
    """The head of every JSON line, in this order (launcher/supervise/logs.py has the schema)."""
    stamp = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")  # structlog's TimeStamper form
    return {"timestamp": stamp, "severity": severity, "process": process, "message": message}


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
