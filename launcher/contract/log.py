"""The launcher's logger as every layer calls it. The set-up (structlog, JSON or console, redaction)
lives in the runtime (launcher/supervise/logs.py); watchers and checks only need this protocol."""

from __future__ import annotations

from typing import Any, Protocol


class Log(Protocol):
    """A structlog BoundLogger in the pod; a recorder in tests."""

    def debug(self, event: str, **fields: Any) -> Any: ...
    def info(self, event: str, **fields: Any) -> Any: ...
    def warning(self, event: str, **fields: Any) -> Any: ...
    def error(self, event: str, **fields: Any) -> Any: ...
