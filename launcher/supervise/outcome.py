"""How a pod ended: the exit code and the reason, shared by `run` and the supervisor."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of /dev/termination-log


@dataclass
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
