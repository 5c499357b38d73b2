"""How a pod ended: the exit code and reason shared by `run` and the supervisor, and the termination
message made of them. The stop state and the exit-code table are the contract's (launcher/contract/)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from launcher.contract.exits import (
    ENGINE_OWN,
    EVENT_REASONS,
    SIGNALLED,
    code_name,
    describe_exit,
    exit_code_of,
)
from launcher.contract.stop import Failed, StopRequested, StopState

TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of /dev/termination-log


@dataclass(frozen=True)
class Outcome:
    """How the pod ended: the exit code and why, root cause first."""

    exit_code: int
    reason: str
    output: list[str] = field(default_factory=list)  # the failing process's last lines
    name: str = ""  # the exit-code row's name, where the code alone does not tell (exits.code_name)
    # How it came to end, after the cause (a parked pod's "parked 30 s ...; stopped by SIGTERM"): in
    # the termination message and the last line, not in the Event, which records the cause once.
    detail: str = ""
    refusal: str = ""  # the engine refused its configuration (contract/stop.py Failed.refusal)

    @property
    def code_name(self) -> str:
        return self.name or code_name(self.exit_code)

    @property
    def event_reason(self) -> str:
        return EVENT_REASONS[self.code_name]

    @property
    def head(self) -> str:
        return f"{self.reason} ({self.detail})" if self.detail else self.reason

    def termination_message(self, limit: int = TERMINATION_LIMIT) -> str:
        """The reason first, then as many of the NEWEST output lines as fit (a traceback's last
        line is the one that names the error), with a marker where older lines were left out."""
        head = self.head
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


def final_outcome(
    stop: StopState, engine: str, engine_exit: int | None, engine_tail: Sequence[str]
) -> Outcome:
    """How the pod ended, once every process is gone. A requested stop that completed in time is a
    clean exit, also for a main process that simply died of the SIGTERM we forwarded (mooncake_client
    does); an engine that failed while stopping gives its own code."""
    if isinstance(stop, Failed):
        return Outcome(stop.exit_code, stop.reason, list(stop.output), stop.name, refusal=stop.refusal)
    reason = stop.reason if isinstance(stop, StopRequested) else "stopped"
    if engine_exit in (None, 0, -signal.SIGTERM):
        return Outcome(0, reason)
    assert engine_exit is not None
    return Outcome(
        exit_code_of(engine_exit),
        f"{reason}; {engine} {describe_exit(engine_exit)} while stopping",
        list(engine_tail),
        SIGNALLED.name if engine_exit < 0 else ENGINE_OWN.name,
    )
