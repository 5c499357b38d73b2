"""The launcher's own logs (structlog: JSON in pods, readable on a terminal) and its children's output,
passed through line by line with the process name attached. Secret values never reach either.

In JSON both are one object per line with one schema: `timestamp` (RFC 3339, UTC), `severity`
(Cloud Logging's LogSeverity names, which GKE's agent and most collectors read), `process` (who wrote
the line: `llm-d-launcher` or the child's name), `message`; then the launcher's fields, or the
child's `stream`. (Cloud Logging, "Structured logging": the special JSON fields `severity`, `message`
and `timestamp`.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, MutableMapping
from typing import IO, Any, Protocol

from launcher.contract.redact import REDACTED, Scrubber, is_secret_name
from launcher.stderr import LAUNCHER, json_head
from launcher.supervise.severity import launcher_severity, severity_of


@contextlib.contextmanager
def _rich_hidden() -> Iterator[None]:
    """structlog's console renderer imports `rich` when it is installed (vLLM's images have it) to
    draw tracebacks, which the launcher never logs: ~2.9 MB of RSS (rich and pygments) for nothing.
    Hidden while structlog loads, so structlog falls back to plain tracebacks; given back after."""
    hidden = "rich" not in sys.modules
    if hidden:
        sys.modules["rich"] = None  # type: ignore[assignment]  # None makes `import rich` fail
    try:
        yield
    finally:
        if hidden:
            del sys.modules["rich"]


with _rich_hidden():  # the one load-time import of structlog (tests/unit/supervise/test_log_imports.py)
    import structlog


def configure(as_json: bool, scrub: Scrubber, stream: IO[str] | FdWriter) -> structlog.stdlib.BoundLogger:
    def clean(value: Any) -> Any:
        """Secrets hidden at any depth (by value, and by name in a mapping); a tuple as a JSON list."""
        if isinstance(value, str):
            return scrub(value)
        if isinstance(value, dict):
            return {str(k): REDACTED if is_secret_name(str(k)) else clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            event[key] = REDACTED if is_secret_name(key) else clean(value)
        return event

    renderer: list[Any] = (
        [to_schema, structlog.processors.JSONRenderer()]
        if as_json
        else [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event=0)]
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            *renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(stream),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    logger: structlog.stdlib.BoundLogger = structlog.get_logger("llm-d-launcher")
    return logger


# A caller's field named like the head is renamed, so the head always means the same: `process` (the
# child a launcher line is about) becomes `child`, a `message` (e.g. aiohttp's) `logged`.
_RENAMED = {"process": "child", "message": "logged", "severity": "logged_severity"}


def to_schema(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog's event as the shared schema (the head, then the caller's fields)."""
    for key, renamed in _RENAMED.items():
        if key in event:
            event[renamed] = event.pop(key)
    head = json_head(LAUNCHER, launcher_severity(event.pop("level", "")), str(event.pop("event", "")))
    head["timestamp"] = event.pop("timestamp", head["timestamp"])
    return head | dict(event)


QUEUE_LIMIT = 1 << 20  # bytes of output held per stream while its reader is slow
FINAL_DRAIN_SECONDS = 2.0  # at exit, how long a reader that fell behind is waited for (then dropped)


class FdWriter:
    """One output fd (stdout or stderr) that never blocks the launcher: when whoever reads it (a
    container runtime's log pipe) falls behind, lines wait in a bounded queue written out as the fd
    polls writable (the event loop's add_writer), so probes and signals are served meanwhile. Past
    the bound a line is dropped and counted; the count is said once the reader has caught up.

    Writes go out in pieces of at most PIPE_BUF bytes, each after a poll: a pipe that polls writable
    takes that much without blocking, so the fd's own (shared) blocking mode is left alone."""

    def __init__(self, fd: int, notice: Callable[[int], str], limit: int = QUEUE_LIMIT) -> None:
        self.fd, self.notice, self.limit = fd, notice, limit
        self.queue: deque[bytes] = deque()
        self.queued = 0  # bytes in the queue
        self.dropped = 0  # lines dropped, in total
        self.unsaid = 0  # lines dropped since the last notice
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watching = False

    def write(self, text: str) -> int:
        data = text.encode("utf-8", errors="replace")
        if self.queued + len(data) > self.limit:
            self.dropped += 1
            self.unsaid += 1
        else:
            self.queue.append(data)
            self.queued += len(data)
            self.pump()
        return len(text)

    def flush(self) -> None:
        """Nothing to do: write() already passed on all the reader would take."""

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pump()

    def detach(self) -> None:
        """Outside the loop, what the reader cannot take at once stays queued (or is dropped)."""
        self._watch(False)
        self.loop = None

    def drain(self, deadline: float) -> None:
        """Blocks until the queue is written out or the monotonic deadline passes: the process
        ends next (os._exit), and what is still queued then is lost."""
        while self.queue and (remaining := deadline - time.monotonic()) > 0:
            select.select([], [self.fd], [], remaining)
            self.pump()

    def pump(self) -> None:
        while self.queue:
            head = self.queue[0]
            if not select.select([], [self.fd], [], 0)[1]:
                break
            try:
                n = os.write(self.fd, head[: select.PIPE_BUF])
            except BlockingIOError:
                break
            except OSError:  # nobody reads our output any more (EPIPE): keep supervising
                self.dropped += len(self.queue)
                self.queue.clear()
                self.queued = 0
                break
            self.queued -= n
            if n < len(head):
                self.queue[0] = head[n:]
            else:
                self.queue.popleft()
            if not self.queue and self.unsaid:
                said = self.notice(self.unsaid).encode()
                self.unsaid = 0
                self.queue.append(said)
                self.queued += len(said)
        self._watch(bool(self.queue))

    def _watch(self, on: bool) -> None:
        if self.loop is None or on == self.watching:
            return
        if on:
            self.loop.add_writer(self.fd, self.pump)
        else:
            self.loop.remove_writer(self.fd)
        self.watching = on


class ChildOutput:
    """Writes one child's line to the launcher's stdout or stderr (the stream the child used); the
    launcher's own log shares the stderr writer, so the two stay in order."""

    def __init__(self, as_json: bool, scrub: Scrubber) -> None:
        self.as_json = as_json
        self.scrub = scrub
        self.stdout = FdWriter(1, self._notice)
        self.stderr = FdWriter(2, self._notice)

    @property
    def dropped(self) -> int:
        return self.stdout.dropped + self.stderr.dropped

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stdout.attach(loop)
        self.stderr.attach(loop)

    def detach(self) -> None:
        self.stdout.detach()
        self.stderr.detach()

    def drain(self, seconds: float = FINAL_DRAIN_SECONDS) -> None:
        """Before the process ends: what a slow reader has not taken yet, within `seconds` for both."""
        deadline = time.monotonic() + seconds
        self.stdout.drain(deadline)
        self.stderr.drain(deadline)

    def _notice(self, count: int) -> str:
        event = f"{count} lines dropped: the reader of the launcher's output was too slow"
        if self.as_json:
            return json.dumps(json_head(LAUNCHER, "WARNING", event)) + "\n"
        return f"{LAUNCHER} | {event}\n"

    def line(self, process: str, stream: str, text: str) -> str:
        text = self.scrub(text)
        out = self.stderr if stream == "stderr" else self.stdout
        if self.as_json:
            line = json_head(process, severity_of(text), text) | {"stream": stream}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        else:
            out.write(f"{process} | {text}\n")
        return text


TAIL_LINES = 40  # output lines kept per process for the termination message
MAX_LINE = 64 * 1024  # a longer "line" is passed on in pieces


class OutputOwner(Protocol):
    """The process whose pipe a LineReader reads: its name, and the tail kept for its obituary."""

    @property
    def name(self) -> str: ...

    tail: deque[str]


_LINE_END = re.compile(rb"\r?\n|\r")


class Continued(str):
    """A later piece of a line longer than MAX_LINE, in a tail: it continues the entry before it (an
    engine's refusal is recognised on the whole line, launcher/supervise/refusal.py)."""


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
        self.cut = False  # the last piece emitted was cut from a line that goes on

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
            self.cut = False
        scrub = self.output.scrub
        while len(self.buffer) > MAX_LINE + scrub.longest:  # a secret across the cut is kept whole
            cut = scrub.cut(self.buffer, MAX_LINE)
            self._emit(self.buffer[:cut])
            self.buffer = self.buffer[cut:]
            self.cut = True
        return True

    def flush(self) -> None:
        if self.buffer:
            self._emit(self.buffer)
            self.buffer = b""
        self.cut = False

    def _emit(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        shown = self.output.line(self.state.name, self.stream, text)
        self.state.tail.append(Continued(shown) if self.cut else shown)
        if self.on_line is not None:
            self.on_line(self.state.name, text)
