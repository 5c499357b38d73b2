"""Helpers for watcher tests against real HTTP servers on loopback, in the test's own process."""

from __future__ import annotations

import socket
from typing import Any


class QuietLog:
    """A Log that drops everything (the watchers' log lines are not under test)."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *args, **kwargs: None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
