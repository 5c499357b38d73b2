"""The stop state: whether a stop has begun, and why. Set once by the supervisor, read by the probes,
so both sides import it from here rather than from each other."""

from __future__ import annotations

import enum

from launcher.contract.exits import signal_name
from launcher.contract.record import record


@record
class Running:
    """No stop has begun."""


@record
class StopRequested:
    """A signal asked the pod to stop: not a failure; the engine's own exit decides the code."""

    signum: int

    @property
    def reason(self) -> str:
        return f"stopped by {signal_name(self.signum)}"


class EngineStop(enum.Enum):
    """How a failed pod stops its engine."""

    DRAIN = "drain"  # SIGTERM its main process and wait out the stop's window
    # It stalled and will finish nothing: SIGTERM, SIGCONT to its group (a stopped process could not
    # act on the SIGTERM), only the kill margin, then SIGKILL its whole group.
    STALLED = "stalled"


@record
class Verdict:
    """A watcher's finding that the pod must end although its processes run, and how to stop it."""

    reason: str
    exit_code: int  # shell-style, never 0
    engine: EngineStop = EngineStop.DRAIN


@record
class Failed:
    """A critical process (or a crash-looping sidecar) ended the pod: /livez fails with the reason."""

    reason: str
    exit_code: int  # shell-style, never 0
    output: tuple[str, ...] = ()  # the failing process's last lines
    engine: EngineStop = EngineStop.DRAIN
    name: str = ""  # its exit-code row's name, where the code alone does not tell (exits.code_name)
    # The engine refused its configuration: it exited by itself, non-zero, before loading weights,
    # its last output one of its refusal shapes (launcher/supervise/refusal.py); that line, else "".
    refusal: str = ""

    @classmethod
    def of(cls, verdict: Verdict) -> Failed:
        return cls(verdict.reason, verdict.exit_code, engine=verdict.engine)


StopState = Running | StopRequested | Failed
"""The one fact about a stop: set once, by whichever comes first; the probes read it."""
RUNNING = Running()
