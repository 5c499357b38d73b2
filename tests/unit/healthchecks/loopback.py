"""Helpers for watcher tests against real HTTP servers on loopback, in the test's own process."""

from __future__ import annotations

from typing import Any


class QuietLog:
    """A Log that drops everything (the watchers' log lines are not under test)."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *args, **kwargs: None
