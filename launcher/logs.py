"""The launcher's own logs (structlog: JSON in pods, readable on a terminal) and its children's output,
passed through line by line with the process name attached. Secret values never reach either."""

from __future__ import annotations

import json
import sys
from collections.abc import MutableMapping
from datetime import datetime, timezone
from typing import Any, TextIO

import structlog

from launcher.redact import REDACTED, Scrubber, is_secret_name, redact_env


def wants_json(log_format: str, stream: TextIO | None = None) -> bool:
    """auto: JSON where a machine reads the logs (a pod), console text on a terminal."""
    if log_format == "auto":
        return not (stream or sys.stderr).isatty()
    return log_format == "json"


def configure(as_json: bool, scrub: Scrubber) -> structlog.stdlib.BoundLogger:
    def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if is_secret_name(key):
                event[key] = REDACTED
            elif isinstance(value, dict):
                event[key] = redact_env({str(k): str(v) for k, v in value.items()})
            elif isinstance(value, str):
                event[key] = scrub(value)
            elif isinstance(value, (list, tuple)):
                event[key] = [scrub(v) if isinstance(v, str) else v for v in value]
        return event

    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event=0)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logger: structlog.stdlib.BoundLogger = structlog.get_logger("llm-d-launcher")
    return logger


class ChildOutput:
    """Writes one child's line to the launcher's stdout or stderr (the stream the child used)."""

    def __init__(self, as_json: bool, scrub: Scrubber) -> None:
        self.as_json = as_json
        self.scrub = scrub

    def line(self, process: str, stream: str, text: str) -> str:
        text = self.scrub(text)
        out = sys.stderr if stream == "stderr" else sys.stdout
        if self.as_json:
            stamp = datetime.now(timezone.utc).isoformat()
            record = {"timestamp": stamp, "process": process, "stream": stream, "message": text}
            line = json.dumps(record, ensure_ascii=False) + "\n"
        else:
            line = f"{process} | {text}\n"
        try:
            out.write(line)
            out.flush()
        except (BrokenPipeError, ValueError):  # nobody reads our output any more: keep supervising
            pass
        return text
