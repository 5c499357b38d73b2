"""The stop state: whether a stop has begun, and why. Set once by the supervisor, read by the probes,
so both sides import it from here rather than from each other."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.contract.exits import signal_name


@dataclass(frozen=True)
class Running:
    """No stop has begun."""


@dataclass(frozen=True)
class StopRequested:
    """A signal asked the pod to stop: not a failure; the engine's own exit decides the code."""

    signum: int

    @property
    def reason(self) -> str:
        return f"stopped by {signal_name(self.signum)}"


@dataclass(frozen=True)
class Failed:
    """A critical process (or a crash-looping sidecar) ended the pod: /livez fails with the reason."""

    reason: str
    exit_code: int  # shell-style, never 0
    output: tuple[str, ...] = ()  # the failing process's last lines


StopState = Running | StopRequested | Failed
"""The one fact about a stop: set once, by whichever comes first; the probes read it."""
RUNNING = Running()
