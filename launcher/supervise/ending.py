"""How the pod ends, said in one place: the termination message, the Kubernetes Event on its
LeaderWorkerSet (launcher/supervise/kube_event.py) and the launcher's last log line.

`run` hands every way a pod can end to `Ending.finish`, a parked pod's reasons to its recorder; the
recorder posts each reason once, so no caller keeps track of what was recorded. Nothing here may
change the exit code, and the Event is bounded by LLMD_EVENT_SECONDS: its HTTP and TLS modules are
loaded only when an Event can be posted (never outside an LWS, on the engine's death path)."""

from __future__ import annotations

import io
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from launcher.contract.errors import ConfigError, Problem
from launcher.contract.exits import INTERNAL_ERROR
from launcher.contract.log import Log
from launcher.contract.lws import in_group
from launcher.contract.redact import Scrubber
from launcher.stderr import LAUNCHER, json_head, say, wants_json
from launcher.supervise.kube_event import EventRecorder, EventSettings
from launcher.supervise.outcome import TERMINATION_LIMIT, Outcome


class Ending:
    """One pod's ending. `setting(field)`: a setting's value, from the env alone until the pod's
    settings are read (`run` then points it at them)."""

    def __init__(self, scrub: Scrubber, setting: Callable[[str], Any]) -> None:
        self.scrub, self.setting = scrub, setting
        self.log: Log | None = None  # the launcher's log, once `run` set it up
        self._events: EventRecorder | None = None

    @property
    def events(self) -> EventRecorder | None:
        """The Event recorder, when an Event is wanted: LLMD_EVENT_SECONDS > 0 and an LWS to record it on
        (LWS_NAME, or the LWS env, where its absence is worth a line)."""
        if self._events is None:
            settings = EventSettings.read(self.setting)
            if settings.seconds <= 0 or not (settings.lws or in_group(os.environ)):
                return None
            self._events = EventRecorder(settings, self._log())
        return self._events

    def say(self, problem: Problem, severity: str = "error") -> None:
        """A problem of the inputs, on its own line: JSON when the logs are (LLMD_LOG_FORMAT)."""
        if wants_json(self.setting("log_format")):
            line = json_head(LAUNCHER, severity.upper(), problem.shown(self.scrub)) | {
                "setting": problem.setting
            }
            say(json.dumps(line, ensure_ascii=False))
        else:
            say(problem.line(severity, scrub=self.scrub))

    def refused(self, error: ConfigError) -> Outcome:
        """Bad input: each problem said, exit 2, nothing spawned."""
        for problem in error.problems:
            self.say(problem)
        return Outcome(error.exit_code, "; ".join(p.shown(self.scrub) for p in error.problems))

    def crashed(self, exc: Exception) -> Outcome:
        """A bug or an environment failure, not a user mistake: its traceback (scrubbed), exit 1."""
        said = self.scrub(traceback.format_exc()).rstrip("\n")
        if self.log is not None or wants_json(self.setting("log_format")):
            self._log().error("internal error", traceback=said.splitlines())
        else:
            say(said)
        return Outcome(INTERNAL_ERROR.number, INTERNAL_ERROR.says(error=f"{type(exc).__name__}: {exc}"))

    def finish(self, outcome: Outcome) -> int:
        """The termination message and the Event when the pod failed, then the last line; its exit code."""
        running = self.log is not None  # `run` set its log up: the pod ran, and says so last
        if outcome.exit_code != 0:
            write_termination_message(
                self.setting("termination_log"), self.scrub(outcome.termination_message())
            )
            try:
                if (events := self.events) is not None:
                    events.record(outcome.event_reason, self.scrub(outcome.reason))
            except Exception as exc:  # best effort: it must never change the exit code
                self._log().warning("no Kubernetes Event recorded", why=type(exc).__name__)
        if running and self.log is not None:  # the last line (the runbook's log query looks for it)
            (self.log.error if outcome.exit_code else self.log.info)(
                "exiting", code=outcome.exit_code, reason=self.scrub(outcome.head)
            )
        return outcome.exit_code

    def _log(self) -> Log:
        """The launcher's log; before `run` set it up (the inputs were refused), one on stderr."""
        if self.log is None:
            # Imported here: structlog and asyncio (~100 ms) stay off the path of a refused input.
            from launcher.supervise.logs import configure

            stream = sys.stderr if sys.stderr is not None else io.StringIO()  # fd 2 closed: said nowhere
            self.log = configure(wants_json(self.setting("log_format"), stream), self.scrub, stream)
        return self.log


def write_termination_message(path: str, message: str) -> None:
    """Kubernetes shows this file as the container's last state. The head carries the root cause, so
    the message is cut at the end, never at the start. Not writable (e.g. outside a pod, a FIFO
    no one reads), or a relative path (refused by the settings, and never meant to land in the
    working directory): skipped."""
    if not os.path.isabs(path):
        return
    data = message.encode("utf-8")[:TERMINATION_LIMIT].decode("utf-8", errors="ignore")
    try:  # non-blocking: a FIFO no one reads refuses at once (ENXIO, fifo(7)) instead of a hang at exit
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o666)
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
    except OSError:
        pass
