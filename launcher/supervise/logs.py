"""The launcher's own logs (structlog: JSON in pods, readable on a terminal) and its children's output,
passed through line by line with the process name attached. Secret values never reach either."""

from __future__ import annotations

import json
import os
import re
import sys
from collections import deque
from collections.abc import Callable, MutableMapping
from datetime import datetime, timezone
from typing import IO, Any, Protocol, TextIO

import structlog

from launcher.redact import REDACTED, Scrubber, is_secret_name, redact_env


class Log(Protocol):
    """The launcher's logger as its users call it (a structlog BoundLogger; a recorder in tests)."""

    def debug(self, event: str, **fields: Any) -> Any: ...
    def info(self, event: str, **fields: Any) -> Any: ...
    def warning(self, event: str, **fields: Any) -> Any: ...
    def error(self, event: str, **fields: Any) -> Any: ...


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


TAIL_LINES = 40  # output lines kept per process for the termination message
MAX_LINE = 64 * 1024  # a longer "line" is passed on in pieces


class OutputOwner(Protocol):
    """The process whose pipe a LineReader reads: its name, and the tail kept for its obituary."""

    @property
    def name(self) -> str: ...

    tail: deque[str]


_LINE_END = re.compile(rb"\r?\n|\r")


class LineReader:
    """Splits one child pipe into lines and hands each to the output, keeping a short tail."""

    def __init__(
        self,
        state: OutputOwner,
        stream: str,
        pipe: IO[bytes],
        output: ChildOutput,
        on_line: Callable[[str, str], None] | None,
    ) -> None:
        self.state, self.stream, self.pipe, self.output, self.on_line = state, stream, pipe, output, on_line
        self.fd = pipe.fileno()
        self.buffer = b""

    def read(self) -> bool | None:
        """One non-blocking read: True if data came, None if none is waiting, False at end of file."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return None
        except OSError:
            return False
        if not chunk:
            return False
        self.buffer += chunk
        # \r ends a line too: progress bars (weight loading) rewrite one line in place.
        *lines, self.buffer = _LINE_END.split(self.buffer)
        for line in lines:
            if line:
                self._emit(line)
        scrub = self.output.scrub
        while len(self.buffer) > MAX_LINE + scrub.longest:  # a secret across the cut is kept whole
            cut = scrub.cut(self.buffer, MAX_LINE)
            self._emit(self.buffer[:cut])
            self.buffer = self.buffer[cut:]
        return True

    def flush(self) -> None:
        if self.buffer:
            self._emit(self.buffer)
            self.buffer = b""

    def _emit(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        self.state.tail.append(self.output.line(self.state.name, self.stream, text))
        if self.on_line is not None:
            self.on_line(self.state.name, text)
