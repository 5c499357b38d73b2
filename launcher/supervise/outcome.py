"""How a pod stops and how it ended: the stop state the probes read, and the exit code and reason
shared by `run` and the supervisor."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of /dev/termination-log

# Exit codes the launcher chooses itself when it ends the pod (docs/reference/exit-codes.md); otherwise
# the pod exits with the engine's own code, 128+N for signal N, 2 for bad input, 1 for an internal error.
EXIT_ENGINE_QUIT = 3  # the engine exited 0 although no stop was asked for: a crash, not a success
EXIT_GROUP_BROKEN = 4  # another pod of the LWS group is gone (healthchecks/peers.py)
EXIT_STALLED = 5  # the engine runs but makes no progress: its canary failed (healthchecks/forward.py)
EXIT_STARTUP_DEADLINE = 6  # start-up did not end within LLMD_STARTUP_SECONDS


@dataclass(frozen=True)
class Outcome:
    """How the pod ended: the exit code and why, root cause first."""

    exit_code: int
    reason: str
    output: list[str] = field(default_factory=list)  # the failing process's last lines

    def termination_message(self, limit: int = TERMINATION_LIMIT) -> str:
        """The reason first, then as many of the NEWEST output lines as fit (a traceback's last
        line is the one that names the error), with a marker where older lines were left out."""
        head = self.reason
        if not self.output:
            return head
        budget = limit - len(head.encode()) - len("\nlast output:\n…\n".encode())
        kept: list[str] = []
        for line in reversed(self.output):
            size = len(line.encode()) + 1
            if size > budget:
                break
            kept.insert(0, line)
            budget -= size
        gap = ["…"] if len(kept) < len(self.output) else []
        return "\n".join([head, "last output:", *gap, *kept])


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


def final_outcome(
    stop: StopState, engine: str, engine_exit: int | None, engine_tail: Sequence[str]
) -> Outcome:
    """How the pod ended, once every process is gone. A requested stop that completed in time is a
    clean exit, also for a main process that simply died of the SIGTERM we forwarded (mooncake_client
    does); an engine that failed while stopping gives its own code."""
    if isinstance(stop, Failed):
        return Outcome(stop.exit_code, stop.reason, list(stop.output))
    reason = stop.reason if isinstance(stop, StopRequested) else "stopped"
    if engine_exit in (None, 0, -signal.SIGTERM):
        return Outcome(0, reason)
    assert engine_exit is not None
    return Outcome(
        exit_code_of(engine_exit),
        f"{reason}; {engine} {describe_exit(engine_exit)} while stopping",
        list(engine_tail),
    )


def exit_code_of(code: int) -> int:
    """A shell-style exit code: a child killed by signal N gives 128+N (SIGKILL 137, SIGTERM 143)."""
    return 128 - code if code < 0 else code


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # real-time signals have no name
        return f"signal {signum}"


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"
